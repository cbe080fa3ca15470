// Device graphs (cuda_graph): the training step captured once and replayed must train exactly as
// the eager step does. The cuda backend's CUDA graphs run only on a GPU, so the contract is also
// checked here on the CPU, through "graph-recorder": a backend over the reference that behaves
// as a CUDA stream under capture does. Between begin_capture and end_capture it records every
// call instead of running it, refuses anything that waits for the device or moves host data, and
// keeps the memory of the capture in a GraphPool; replay runs the recorded calls on the same
// pointers. A trainer that forgot to stage an input, kept a stale buffer, or let eager work reuse
// a graph's memory trains differently from eager here, or trips AddressSanitizer.
//
// TRAINLAB_GRAPH_TEST_BACKEND=cuda runs the same equivalence on the cuda backend (the GPU tests).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/graph_pool.h"
#include "backends/registry.h"
#include "engine/trainer.h"

using namespace trainlab;

namespace {

class GraphRecorder final : public Backend {
 public:
  std::string name() const override { return "graph-recorder"; }
  std::string describe() const override { return "graph-recorder over " + inner_.describe(); }
  std::map<std::string, std::int64_t> counters() const override {
    auto out = Backend::counters();
    out["graphs"] = static_cast<std::int64_t>(graphs_.size());
    out["replays"] = replays_;
    return out;
  }
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(DType dtype) const override { return inner_.supports(dtype); }
  void set_num_threads(int threads) override { inner_.set_num_threads(threads); }
  int num_threads() const override { return inner_.num_threads(); }

  void* allocate(std::size_t bytes) override {
    if (pool_.capturing()) {
      if (void* p = pool_.take(bytes)) return p;
      void* p = inner_.allocate(bytes);
      pool_.adopt(p);
      return p;
    }
    return inner_.allocate(bytes);
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (ptr != nullptr && pool_.give_back(ptr, bytes)) return;
    inner_.deallocate(ptr, bytes);
  }
  AllocatorStats allocator_stats() const override { return inner_.allocator_stats(); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    refuse("copy_from_host");
    inner_.copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    refuse("copy_to_host");
    inner_.copy_to_host(dst, src, bytes);
  }
  void synchronize() override { refuse("synchronize"); }
  std::unique_ptr<Timer> make_timer() override { return inner_.make_timer(); }

  bool supports_graphs() const override { return true; }
  bool capturing() const override { return pool_.capturing(); }
  void begin_capture() override {
    REQUIRE_FALSE(pool_.capturing());
    pool_.begin_capture();
    recording_.clear();
  }
  int end_capture() override {
    REQUIRE(pool_.capturing());
    pool_.end_capture();
    graphs_.push_back(std::move(recording_));
    recording_.clear();
    return static_cast<int>(graphs_.size()) - 1;
  }
  void abort_capture() noexcept override {
    pool_.end_capture();
    recording_.clear();
  }
  void replay(int graph) override {
    refuse("replay");
    for (const auto& call : graphs_.at(static_cast<std::size_t>(graph))) call();
    ++replays_;
  }

  void fill(DType d, void* y, std::int64_t n, double v) override {
    run([=, this] { inner_.fill(d, y, n, v); });
  }
  void copy_strided(DType d, const void* src, const Layout& sl, void* dst, const Layout& dl) override {
    run([=, this] { inner_.copy_strided(d, src, sl, dst, dl); });
  }
  void cast(DType sd, const void* src, DType dd, void* dst, std::int64_t n) override {
    run([=, this] { inner_.cast(sd, src, dd, dst, n); });
  }
  void binary(BinaryOp op, DType d, const void* a, const void* b, void* y, std::int64_t n) override {
    run([=, this] { inner_.binary(op, d, a, b, y, n); });
  }
  void affine(DType d, const void* x, void* y, std::int64_t n, double scale, double shift) override {
    run([=, this] { inner_.affine(d, x, y, n, scale, shift); });
  }
  void axpy(DType d, std::int64_t n, double alpha, const void* x, void* y) override {
    run([=, this] { inner_.axpy(d, n, alpha, x, y); });
  }
  void sum(DType d, const void* x, std::int64_t n, void* out) override {
    run([=, this] { inner_.sum(d, x, n, out); });
  }
  bool unscale_and_check_finite(DType d, void* x, std::int64_t n, double inv_scale) override {
    refuse("unscale_and_check_finite");
    return inner_.unscale_and_check_finite(d, x, n, inv_scale);
  }
  void relu_forward(DType d, const void* x, void* y, std::int64_t n) override {
    run([=, this] { inner_.relu_forward(d, x, y, n); });
  }
  void relu_backward(DType d, const void* y, const void* dy, void* dx, std::int64_t n) override {
    run([=, this] { inner_.relu_backward(d, y, dy, dx, n); });
  }
  void bias_add_forward(DType d, const void* x, const void* bias, void* y, std::int64_t outer, std::int64_t channels,
                        std::int64_t inner) override {
    run([=, this] { inner_.bias_add_forward(d, x, bias, y, outer, channels, inner); });
  }
  void bias_add_backward(DType d, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                         std::int64_t inner) override {
    run([=, this] { inner_.bias_add_backward(d, dy, dbias, outer, channels, inner); });
  }
  void linear_forward(DType d, const void* x, const void* w, const void* b, bool relu, void* y, std::int64_t batch,
                      std::int64_t in, std::int64_t out) override {
    run([=, this] { inner_.linear_forward(d, x, w, b, relu, y, batch, in, out); });
  }
  void linear_backward_data(DType d, const void* dy, const void* w, void* dx, std::int64_t batch, std::int64_t in,
                            std::int64_t out) override {
    run([=, this] { inner_.linear_backward_data(d, dy, w, dx, batch, in, out); });
  }
  void linear_backward_weights(DType d, const void* dy, const void* x, void* dw, void* db, std::int64_t batch,
                               std::int64_t in, std::int64_t out) override {
    run([=, this] { inner_.linear_backward_weights(d, dy, x, dw, db, batch, in, out); });
  }
  void conv2d_forward(DType d, const Conv2dShape& s, const void* x, const void* w, const void* b, bool relu,
                      void* y) override {
    run([=, this] { inner_.conv2d_forward(d, s, x, w, b, relu, y); });
  }
  void conv2d_backward_data(DType d, const Conv2dShape& s, const void* dy, const void* w, void* dx) override {
    run([=, this] { inner_.conv2d_backward_data(d, s, dy, w, dx); });
  }
  void conv2d_backward_weights(DType d, const Conv2dShape& s, const void* dy, const void* x, void* dw,
                               void* db) override {
    run([=, this] { inner_.conv2d_backward_weights(d, s, dy, x, dw, db); });
  }
  std::size_t max_pool2d_workspace_bytes(DType d, const Pool2dShape& s) override {
    return inner_.max_pool2d_workspace_bytes(d, s);
  }
  void max_pool2d_forward(DType d, const Pool2dShape& s, const void* x, void* y, void* ws) override {
    run([=, this] { inner_.max_pool2d_forward(d, s, x, y, ws); });
  }
  void max_pool2d_backward(DType d, const Pool2dShape& s, const void* dy, const void* ws, void* dx) override {
    run([=, this] { inner_.max_pool2d_backward(d, s, dy, ws, dx); });
  }
  void softmax_cross_entropy_forward(DType d, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                     std::int64_t classes, void* probs, void* loss) override {
    run([=, this] { inner_.softmax_cross_entropy_forward(d, logits, labels, batch, classes, probs, loss); });
  }
  void softmax_cross_entropy_backward(DType d, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, const void* dloss, void* dlogits) override {
    run([=, this] { inner_.softmax_cross_entropy_backward(d, probs, labels, batch, classes, dloss, dlogits); });
  }
  void sgd_step(DType d, std::int64_t n, void* p, const void* g, void* buf, const SgdStep& s) override {
    run([=, this] { inner_.sgd_step(d, n, p, g, buf, s); });
  }
  void adamw_step(DType d, std::int64_t n, void* p, const void* g, void* m, void* v, const AdamWStep& s) override {
    run([=, this] { inner_.adamw_step(d, n, p, g, m, v, s); });
  }

 private:
  void run(std::function<void()> call) {
    if (pool_.capturing()) {
      recording_.push_back(std::move(call));
    } else {
      call();
    }
  }
  void refuse(const char* what) const {
    if (pool_.capturing()) throw Error(std::string("graph-recorder: ") + what + " while capturing");
  }

  Backend& inner_ = get_backend("reference");
  GraphPool pool_;
  std::vector<std::function<void()>> recording_;
  std::vector<std::vector<std::function<void()>>> graphs_;
  std::int64_t replays_ = 0;
};

// Registered on first use only, so the other test groups (which walk every CPU backend) never see it.
std::string graph_backend() {
  static const BackendRegistration registration(
      BackendInfo{"graph-recorder", "the reference backend with CUDA-graph capture semantics (tests)", DeviceType::cpu,
                  -1000},
      [] { return std::make_unique<GraphRecorder>(); });
  const char* chosen = std::getenv("TRAINLAB_GRAPH_TEST_BACKEND");
  return chosen != nullptr && *chosen != '\0' ? chosen : "graph-recorder";
}

TrainConfig graph_config() {
  TrainConfig c;
  c.backend = graph_backend();
  c.steps = 7;
  c.batch = 8;
  c.train_samples = 48;  // six batches an epoch: the run crosses an epoch boundary
  c.eval_samples = 16;
  c.eval_batch = 16;
  c.warmup = 0;
  c.log_every = 1000;
  c.eval_at_end = false;
  return c;
}

// The cuda backend is deterministic (deterministic cuDNN algorithms, one stream), but is given a
// hair of room; the recorder replays the reference's very calls, so it must match bit for bit.
double tolerance(const TrainConfig& c) { return c.backend == "graph-recorder" ? 0.0 : 1e-6; }

void check_graph_equals_eager(TrainConfig c) {
  c.cuda_graph = false;
  Trainer eager(c);
  const TrainResult expected = eager.train(nullptr);
  c.cuda_graph = true;
  Trainer graphed(c);
  const std::int64_t replays_before = graphed.backend().counters()["replays"];
  const TrainResult got = graphed.train(nullptr);
  if (c.backend == "graph-recorder") {
    // Two eager steps, then (steps - 2) * accumulate forward and backward replays each.
    CHECK(graphed.backend().counters()["replays"] - replays_before == 2 * (c.steps - 2) * c.accumulate);
  }
  REQUIRE(got.losses.size() == expected.losses.size());
  const double tol = tolerance(c);
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(got.losses[i] - expected.losses[i]) <= tol * std::abs(expected.losses[i]));
  }
  const auto a = eager.model().named_parameters(), b = graphed.model().named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    const auto x = a[i].second.to(DType::f64).to_vector<double>(), y = b[i].second.to(DType::f64).to_vector<double>();
    REQUIRE(x.size() == y.size());
    double worst = 0;
    for (std::size_t j = 0; j < x.size(); ++j) worst = std::max(worst, std::abs(x[j] - y[j]) / (std::abs(x[j]) + 1e-3));
    CHECK(worst <= tol);
  }
}

}  // namespace

TEST_CASE("graphs: the pool keeps a capture's memory from eager work", "[graph]") {
  GraphPool pool;
  int eager_block = 0, graph_block = 0, freed_during = 0;
  CHECK_FALSE(pool.give_back(&eager_block, 64));  // an ordinary free goes to the allocator
  pool.begin_capture();
  CHECK(pool.take(64) == nullptr);
  pool.adopt(&graph_block);
  CHECK(pool.give_back(&freed_during, 64));  // freed while capturing: the graph may read it
  CHECK(pool.take(64) == &freed_during);     // a capture may reuse it
  pool.end_capture();
  CHECK(pool.give_back(&graph_block, 128));  // a graph's block stays with the graphs after the capture
  CHECK_FALSE(pool.give_back(&eager_block, 64));
  CHECK(pool.blocks() == 2);
}

TEST_CASE("graphs: replaying the captured step trains exactly as the eager step", "[graph]") {
  TrainConfig c = graph_config();
  SECTION("f32, SGD with momentum") { check_graph_equals_eager(c); }
  SECTION("bf16 autocast, channels_last, fused") {
    c.dtype = "bf16";
    c.layout = "nhwc";
    c.fuse = true;
    check_graph_equals_eager(c);
  }
  SECTION("gradient accumulation, AdamW, warm-up and cosine schedule") {
    c.accumulate = 2;
    c.optimizer = "adamw";
    c.lr = 1e-3;
    c.schedule = "warmup_cosine";
    c.warmup_steps = 2;
    check_graph_equals_eager(c);
  }
}

TEST_CASE("graphs: a capture the step cannot support is refused by name", "[graph]") {
  TrainConfig c = graph_config();
  c.cuda_graph = true;
  SECTION("a backend without graphs") {
    c.backend = "reference";
    CHECK_THROWS_WITH(Trainer(c), Catch::Contains("backend 'reference' cannot"));
  }
  SECTION("f16 and its host-side loss scaler") {
    c.dtype = "f16";
    if (get_backend(c.backend).supports(DType::f16)) {
      CHECK_THROWS_WITH(Trainer(c), Catch::Contains("cuda_graph with dtype f16"));
    }
  }
}

TEST_CASE("graphs: work that waits for the device fails the capture, and the backend recovers", "[graph]") {
  Backend& backend = get_backend(graph_backend());
  Tensor x = Tensor::full({}, 2.0, DType::f32, backend);
  backend.begin_capture();
  CHECK_THROWS_WITH(x.item(), Catch::Contains("while"));
  backend.abort_capture();
  CHECK_FALSE(backend.capturing());
  CHECK(x.item() == 2.0);
}
