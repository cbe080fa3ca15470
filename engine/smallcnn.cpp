#include "engine/smallcnn.h"

namespace trainlab {

SmallCNN::SmallCNN(const InitOptions& init) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, 32, 3, 1, 1, init));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(32, 64, 3, 1, 1, init));
  fc1 = register_module("fc1", std::make_shared<Linear>(64 * 8 * 8, 256, init));
  fc2 = register_module("fc2", std::make_shared<Linear>(256, kClasses, init));
}

Tensor SmallCNN::forward(const Tensor& x) {
  TL_CHECK(x.dim() == 4 && x.size(1) == kChannels && x.size(2) == kHeight && x.size(3) == kWidth,
           "SmallCNN: input must be [N, 3, 32, 32], got " + shape_str(x.shape()));
  const Pool2dOptions pool = Pool2dOptions::square(2);
  if (fused_) {
    Tensor h = max_pool2d(conv2d_fused(x, conv1->weight, conv1->bias, true, conv1->options), pool);
    h = max_pool2d(conv2d_fused(h, conv2->weight, conv2->bias, true, conv2->options), pool);
    h = linear_fused(h.flatten(1), fc1->weight, fc1->bias, true);
    return linear_fused(h, fc2->weight, fc2->bias, false);
  }
  Tensor h = max_pool2d(relu(conv1->forward(x)), pool);
  h = max_pool2d(relu(conv2->forward(h)), pool);
  h = h.flatten(1);
  h = relu(fc1->forward(h));
  return fc2->forward(h);
}

double SmallCNN::flop_per_sample(bool forward_only) {
  const double conv1 = 32.0 * 32 * 32 * 3 * 3 * 3, conv2 = 64.0 * 16 * 16 * 32 * 3 * 3;
  const double fc1 = 4096.0 * 256, fc2 = 256.0 * 10;
  const double forward = conv1 + conv2 + fc1 + fc2;
  return 2 * (forward_only ? forward : forward + (conv2 + fc1 + fc2) + forward);
}

}  // namespace trainlab
