// Softmax cross-entropy, mean over the batch, computed stably through log-sum-exp.
// Forward keeps the softmax probabilities; backward dlogits = (p - onehot(label)) * g / N.
#include "engine/core/autocast.h"
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels) {
  TL_SPAN("cross_entropy.forward");
  ops_detail::check_defined("cross_entropy", "logits", logits_in);
  const Tensor logits = autocast_f32(logits_in);  // the loss is computed in f32 under autocast
  ops_detail::check_defined("cross_entropy", "labels", labels);
  ops_detail::check_floating("cross_entropy", logits);
  ops_detail::check_rank("cross_entropy", "logits", logits, 2, "[N, classes]");
  TL_CHECK(labels.dtype() == DType::i64,
           std::string("cross_entropy: labels must be i64, got ") + dtype_name(labels.dtype()));
  TL_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
           "cross_entropy: labels must be [" + std::to_string(logits.size(0)) + "] for logits " +
               shape_str(logits.shape()) + ", got " + shape_str(labels.shape()));
  TL_CHECK(&labels.backend() == &logits.backend(), "cross_entropy: logits and labels are on different backends");
  TL_CHECK(logits.size(0) > 0 && logits.size(1) > 0, "cross_entropy: empty logits " + shape_str(logits.shape()));
  const std::int64_t batch = logits.size(0), classes = logits.size(1);
  const Tensor sz = ops_detail::dense(logits), sl = ops_detail::dense(labels);
  Tensor probs = Tensor::empty(logits.shape(), logits.dtype(), logits.backend());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.backend());
  logits.backend().softmax_cross_entropy_forward(logits.dtype(), sz.raw_data(),
                                                 static_cast<const std::int64_t*>(sl.raw_data()), batch, classes,
                                                 probs.raw_data(), loss.raw_data());
  return record(loss, "cross_entropy", {logits}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dloss = ops_detail::dense(g);
    Tensor dlogits = Tensor::empty(probs.shape(), probs.dtype(), probs.backend());
    probs.backend().softmax_cross_entropy_backward(probs.dtype(), probs.raw_data(),
                                                   static_cast<const std::int64_t*>(sl.raw_data()), batch, classes,
                                                   dloss.raw_data(), dlogits.raw_data());
    return std::vector<Tensor>{dlogits};
  });
}

}  // namespace trainlab
