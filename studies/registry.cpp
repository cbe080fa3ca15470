#include "studies/registry.h"

#include "studies/allreduce/allreduce_study.h"
#include "studies/buckets/buckets_study.h"
#include "studies/compare_torch/compare_torch.h"
#include "studies/cost_to_accuracy/cost_study.h"
#include "studies/dataset/dataset_study.h"
#include "studies/fashion/fashion_study.h"
#include "studies/ladder/ladder.h"
#include "studies/memory/memory_study.h"
#include "studies/parallelism/parallelism_study.h"
#include "studies/pinning/pinning_study.h"
#include "studies/pipeline/pipeline_study.h"
#include "studies/scaling/scaling_study.h"
#include "studies/tensor_parallel/tensor_parallel_study.h"

namespace trainlab::bench {

std::vector<SectionDef> report_sections() {
  return {ladder_report_section(),
          cost_report_section(),
          pinning_report_section(),
          memory_report_section(),
          dataset_report_section(),
          fashion_report_section(),
          resnet_report_section(),
          compare_torch_report_section(),
          compare_torch_resnet_report_section(),
          allreduce_report_section(),
          collectives_report_section(),
          allreduce_hierarchical_report_section(),
          allreduce_routes_report_section(),
          buckets_report_section(),
          scaling_report_section(),
          pipeline_report_section(),
          tensor_parallel_report_section(),
          parallelism_report_section()};
}

}  // namespace trainlab::bench
