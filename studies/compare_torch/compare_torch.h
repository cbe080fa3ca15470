// The comparison with PyTorch: bench/compare_torch.py runs `trainlab throughput` and every PyTorch
// variant of bench/peers/torch_smallcnn.py in turn, and appends `compare_torch` and
// `compare_torch_peer` rows (studies/compare_torch/rows.h); this is their report section.
#pragma once

#include "bench/report/section.h"
#include "studies/compare_torch/rows.h"

namespace trainlab::bench {

SectionDef compare_torch_report_section();
// ResNet-20's (`bench/compare_torch.py --model resnet`): the same, its blocks named *_resnet.
SectionDef compare_torch_resnet_report_section();

}  // namespace trainlab::bench
