// Embedding: rows of a [vocab, width] table picked by i64 indices (token and position embeddings;
// a tied output head reads the same table through linear).
//   forward    y[..., :] = weight[indices[...], :]
//   backward   dweight[v, :] = the sum of dy[i, :] over the positions i with indices[i] = v, in
//              position order (a dense gradient: rows no index names are zero)
// The indices take no gradient; one outside [0, vocab) is an Error naming it and its position.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

Tensor embedding(const Tensor& indices_in, const Tensor& weight) {
  TL_SPAN("embedding.forward");
  ops_detail::check_defined("embedding", "indices", indices_in);
  ops_detail::check_defined("embedding", "weight", weight);
  TL_CHECK(indices_in.dtype() == DType::i64,
           std::string("embedding: indices must be i64, got ") + dtype_name(indices_in.dtype()));
  ops_detail::check_floating("embedding", weight);
  ops_detail::check_rank("embedding", "weight", weight, 2, "[vocab, width]");
  TL_CHECK(&indices_in.backend() == &weight.backend(), "embedding: indices and weight are on different backends (" +
                                                           indices_in.backend().name() + " and " +
                                                           weight.backend().name() + ")");
  const std::int64_t vocab = weight.size(0), width = weight.size(1), n = indices_in.numel();
  const Tensor idx = ops_detail::dense(indices_in), w = ops_detail::dense(weight);
  Shape out_shape = idx.shape();
  out_shape.push_back(width);
  Tensor y = Tensor::empty(out_shape, w.dtype(), w.backend());
  const auto* ip = static_cast<const std::int64_t*>(idx.raw_data());
  w.backend().embedding_forward(w.dtype(), ip, n, w.raw_data(), vocab, width, y.raw_data());
  return record(y, "embedding", {weight}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g);
    Tensor dw = Tensor::empty({vocab, width}, dy.dtype(), dy.backend());
    dy.backend().embedding_backward(dy.dtype(), static_cast<const std::int64_t*>(idx.raw_data()), n, dy.raw_data(),
                                    vocab, width, dw.raw_data());
    return std::vector<Tensor>{dw};
  });
}

}  // namespace trainlab
