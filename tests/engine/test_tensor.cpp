// Tensors: shapes, strides, views, copies, conversions, the RNG and its saved state, and errors.
#include "engine/core/rng.h"
#include "engine/instrument/memory_usage.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {
Tensor iota(const Shape& shape, DType dtype = DType::f64) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(v, shape, ref()).to(dtype);
}
}  // namespace

TEST_CASE("tensor: factories, shape and strides", "[tensor]") {
  const Tensor t = Tensor::zeros({2, 3, 4}, DType::f32, ref());
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.strides() == Shape{12, 4, 1});
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 96);
  CHECK(t.size(-1) == 4);
  CHECK(t.is_contiguous());
  CHECK(t.device_type() == DeviceType::cpu);
  for (float v : t.to_vector<float>()) CHECK(v == 0.0f);
  const Tensor scalar = Tensor::full({}, 3.5, DType::f64, ref());
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item() == 3.5);
  REQUIRE_THROWS_CONTAINING(t.size(3), "dimension 3 is out of range");
  REQUIRE_THROWS_CONTAINING(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}, ref()), "3 values", "[2, 2]");
  REQUIRE_THROWS_CONTAINING(t.to_vector<double>(), "dtype is f32");
  REQUIRE_THROWS_CONTAINING(t.item(), "one-element");
  REQUIRE_THROWS_CONTAINING(Tensor().shape(), "undefined");
}

TEST_CASE("tensor: permute, transpose and contiguous", "[tensor]") {
  const Tensor x = iota({2, 3, 4});
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK_FALSE(p.is_contiguous());
  const auto pv = values(p);  // row-major over the permuted shape
  const auto xv = values(x);
  for (std::int64_t a = 0; a < 4; ++a)
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t c = 0; c < 3; ++c)
        CHECK(pv[static_cast<std::size_t>((a * 2 + b) * 3 + c)] == xv[static_cast<std::size_t>((b * 3 + c) * 4 + a)]);
  const Tensor c = p.contiguous();
  CHECK(c.is_contiguous());
  CHECK(values(c) == pv);
  const Tensor t = iota({3, 5}).transpose(0, 1);
  CHECK(t.shape() == Shape{5, 3});
  CHECK(values(t)[1] == 5.0);
  REQUIRE_THROWS_CONTAINING(x.permute({0, 0, 1}), "repeats");
  REQUIRE_THROWS_CONTAINING(x.permute({0, 1}), "rank 3");
}

TEST_CASE("tensor: reshape, view and flatten", "[tensor]") {
  const Tensor x = iota({2, 3, 4});
  const Tensor r = x.reshape({4, -1});
  CHECK(r.shape() == Shape{4, 6});
  CHECK(r.impl()->storage == x.impl()->storage);  // a view, no copy
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.flatten().shape() == Shape{24});
  const Tensor p = x.permute({1, 0, 2});
  REQUIRE_THROWS_CONTAINING(p.view({6, 4}), "non-contiguous", "use reshape");
  const Tensor copied = p.reshape({6, 4});  // reshape copies when it must
  CHECK(values(copied) == values(p));
  REQUIRE_THROWS_CONTAINING(x.reshape({5, -1}), "cannot reshape");
  REQUIRE_THROWS_CONTAINING(x.reshape({-1, -1}), "only one dimension may be -1");
}

TEST_CASE("tensor: narrow shares storage and offsets correctly", "[tensor]") {
  Tensor x = iota({4, 5});
  const Tensor n = x.narrow(1, 2, 2);
  CHECK(n.shape() == Shape{4, 2});
  CHECK(values(n) == std::vector<double>{2, 3, 7, 8, 12, 13, 17, 18});
  const Tensor rows = x.narrow(0, 1, 2);
  CHECK(rows.is_contiguous());
  CHECK(values(rows)[0] == 5.0);
  Tensor view = x.narrow(1, 0, 1);
  view.fill_(-1.0);  // writes through to x
  CHECK(values(x)[5] == -1.0);
  CHECK(values(x)[6] == 6.0);
  REQUIRE_THROWS_CONTAINING(x.narrow(1, 4, 2), "outside [0, 5)");
}

TEST_CASE("tensor: copy_, clone, detach and dtype/backend conversions", "[tensor]") {
  Tensor a = iota({3, 2});
  Tensor b = Tensor::zeros({2, 3}, DType::f64, ref());
  b.copy_(a.transpose(0, 1));
  CHECK(values(b) == std::vector<double>{0, 2, 4, 1, 3, 5});
  const Tensor c = a.clone();
  CHECK(c.impl()->storage != a.impl()->storage);
  CHECK(values(c) == values(a));
  const Tensor f = a.to(DType::f32);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.to_vector<float>()[5] == 5.0f);
  CHECK(a.to(ref()).same_view(a));
  REQUIRE_THROWS_CONTAINING(b.copy_(a), "source shape [3, 2]");
}

TEST_CASE("tensor: overlapping copies, oversized shapes and dense gradients", "[tensor]") {
  Tensor t = iota({5});
  t.narrow(0, 1, 4).copy_(t.narrow(0, 0, 4));  // overlapping views of one storage
  CHECK(values(t) == std::vector<double>{0, 0, 1, 2, 3});
  REQUIRE_THROWS_CONTAINING(Tensor::empty({1ll << 40, 1ll << 40}, DType::f32, ref()), "more elements than fit");
  REQUIRE_THROWS_CONTAINING(Tensor::empty({1ll << 62}, DType::f32, ref()), "more bytes than fit");
  REQUIRE_THROWS_CONTAINING(Tensor::empty({2, -1}, DType::f32, ref()), "negative dimension");
  Tensor w = Tensor::zeros({3, 3}, DType::f64, ref());
  w.set_requires_grad(true);
  REQUIRE_THROWS_CONTAINING(w.set_grad(iota({3, 3}).transpose(0, 1)), "must be contiguous");
  REQUIRE_THROWS_CONTAINING(
      ref().cast(DType::f64, std::vector<double>{1e300}.data(), DType::i64, std::vector<std::int64_t>(1).data(), 1),
      "cannot convert", "to i64");
}

TEST_CASE("tensor: channels_last memory format", "[tensor]") {
  const Tensor x = iota({2, 3, 4, 5});
  CHECK(x.memory_format() == MemoryFormat::contiguous);
  const Tensor cl = x.contiguous(MemoryFormat::channels_last);
  CHECK(cl.strides() == Shape{60, 1, 15, 3});
  CHECK(cl.memory_format() == MemoryFormat::channels_last);
  CHECK_FALSE(cl.is_contiguous());
  CHECK(values(cl) == values(x));  // the same logical tensor
  // Memory order is N, H, W, C.
  const double* raw = static_cast<const double*>(cl.raw_data());
  CHECK(raw[1] == values(x)[20]);                                           // [0, 1, 0, 0]
  CHECK(raw[3] == values(x)[1]);                                            // [0, 0, 0, 1]
  CHECK(cl.to(DType::f32).memory_format() == MemoryFormat::channels_last);  // casts keep the layout
  CHECK(cl.flatten(1).is_contiguous());  // flatten reorders to NCHW order, as PyTorch
  CHECK(values(cl.flatten(1)) == values(x.flatten(1)));
  // A single channel is both layouts at once and counts as contiguous.
  CHECK(iota({2, 1, 3, 3}).contiguous(MemoryFormat::channels_last).memory_format() == MemoryFormat::contiguous);
  REQUIRE_THROWS_CONTAINING(iota({2, 3}).contiguous(MemoryFormat::channels_last), "4-D");
  CHECK(parse_memory_format("nhwc") == MemoryFormat::channels_last);
  REQUIRE_THROWS_CONTAINING(parse_memory_format("chw"), "unknown layout 'chw'", "nchw, nhwc");
}

TEST_CASE("rng: deterministic, restorable, and in range", "[tensor][rng]") {
  Generator g1(42), g2(42), g3(43);
  for (int i = 0; i < 10; ++i) CHECK(g1.next_u64() == g2.next_u64());
  CHECK(g1.next_u64() != g3.next_u64());

  Generator g(7);
  for (int i = 0; i < 5; ++i) g.normal();
  const std::string saved = g.state_string();
  std::vector<double> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(g.uniform());
  Generator restored(0);
  restored.set_state_string(saved);
  for (int i = 0; i < 20; ++i) CHECK(restored.uniform() == expected[static_cast<std::size_t>(i)]);

  double lo = 1, hi = 0, mean = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = g.uniform();
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    mean += u / 10000;
  }
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);
  CHECK(mean == Approx(0.5).margin(0.02));
  for (int i = 0; i < 1000; ++i) CHECK(g.below(7) < 7);

  // The same seed draws the same tensor.
  Generator t1(5), t2(5);
  CHECK(bitwise_equal(Tensor::uniform({4, 4}, -1, 1, t1, DType::f32, ref()),
                      Tensor::uniform({4, 4}, -1, 1, t2, DType::f32, ref())));

  REQUIRE_THROWS_CONTAINING(restored.set_state_string("xoshiro256**:zz"), "malformed generator state");
  REQUIRE_THROWS_CONTAINING(restored.set_state_string(std::string("xoshiro256**:") + std::string(64, '0')),
                            "all zeros");
}

TEST_CASE("backend registry: lookup and errors", "[tensor][backend]") {
  CHECK(get_backend("reference").name() == "reference");
  CHECK(default_backend_name() == "onednn");  // the highest-priority CPU backend built
  REQUIRE_THROWS_CONTAINING(get_backend("tpu"), "unknown backend 'tpu'", "reference");
  REQUIRE_THROWS_CONTAINING(ref().sgd_step(DType::bf16, 0, nullptr, nullptr, nullptr, SgdStep{}), "sgd_step",
                            "does not support dtype bf16", "supported: f32, f64");
  REQUIRE_THROWS_CONTAINING(ref().relu_forward(DType::i64, nullptr, nullptr, 0), "relu_forward",
                            "does not support dtype i64");
}

TEST_CASE("reference backend: results do not depend on the thread count", "[tensor][backend]") {
  Generator gen(9);
  const Tensor x = random_tensor({5, 3, 9, 7}, gen, DType::f32);
  const Tensor w = random_tensor({4, 3, 3, 3}, gen, DType::f32);
  Backend& be = ref();
  const int saved = be.num_threads();
  auto run = [&](int threads) {
    be.set_num_threads(threads);
    Tensor xi = x.clone(), wi = w.clone();
    xi.set_requires_grad(true);
    wi.set_requires_grad(true);
    sum(mul(relu(conv2d(xi, wi, Conv2dOptions::square(2, 1))), relu(conv2d(xi, wi, Conv2dOptions::square(2, 1)))))
        .backward();
    return std::vector<Tensor>{xi.grad(), wi.grad()};
  };
  const auto one = run(1);
  const auto two = run(2);
  const auto three = run(3);
  be.set_num_threads(saved);
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK(bitwise_equal(one[i], two[i]));
    CHECK(bitwise_equal(one[i], three[i]));
  }
  REQUIRE_THROWS_CONTAINING(be.set_num_threads(0), "threads must be >= 1");
}

TEST_CASE("tensor: release_data frees a storage under every handle, restore_data brings it back; set_data",
          "[tensor]") {
  Backend& be = get_backend("reference");
  Tensor flat = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {6}, be);
  Tensor w = Tensor::zeros({2, 2}, DType::f32, be).set_requires_grad(true);
  w.set_name("fc.weight");
  w.set_data(flat.narrow(0, 2, 4).view({2, 2}));  // now a view of `flat`, still the same leaf
  CHECK(w.requires_grad());
  CHECK(w.to_vector<float>() == std::vector<float>{3, 4, 5, 6});
  const Tensor saved = w.detach();  // a handle an op would save
  const std::int64_t live = memory_usage(DeviceType::cpu).total_live;
  flat.release_data();
  CHECK(memory_usage(DeviceType::cpu).total_live == live - 24);  // freed, though four handles remain
  CHECK_FALSE(w.has_data());
  CHECK_FALSE(saved.has_data());
  CHECK(w.numel() == 4);  // the metadata stays
  REQUIRE_THROWS_WITH(w.to_vector<float>(), Catch::Contains("tensor fc.weight has no memory"));
  REQUIRE_THROWS_WITH(saved.clone(), Catch::Contains("has no memory"));
  flat.restore_data();
  flat.copy_(Tensor::from_vector<float>({6, 5, 4, 3, 2, 1}, {6}, be));
  CHECK(saved.to_vector<float>() == std::vector<float>{4, 3, 2, 1});  // the saved handle sees the new memory
  CHECK(memory_usage(DeviceType::cpu).total_live == live);
  REQUIRE_THROWS_WITH(w.set_data(flat), Catch::Contains("cannot take the memory of [6] f32"));
}

TEST_CASE("tensor: borrowed memory is read and written in place, counted, never freed here; own_data copies it out",
          "[tensor]") {
  Backend& be = get_backend("reference");
  std::vector<float> host = {1, 2, 3, 4, 5, 6};  // memory someone else owns (DDP's shared window)
  const std::int64_t live = memory_usage(DeviceType::cpu).total_live;
  {
    Tensor t = Tensor::borrowed(host.data(), {6}, DType::f32, be);
    CHECK(memory_usage(DeviceType::cpu).total_live == live + 24);  // counted as this process's tensor memory
    const Tensor view = t.narrow(0, 2, 4).view({2, 2});
    CHECK(view.to_vector<float>() == std::vector<float>{3, 4, 5, 6});
    host[2] = 30;  // in place: the tensor reads the owner's memory
    CHECK(view.to_vector<float>()[0] == 30);
    t.copy_(Tensor::from_vector<float>({6, 5, 4, 3, 2, 1}, {6}, be));
    CHECK(host[0] == 6);  // and writes it
    REQUIRE_THROWS_WITH(t.release_data(), Catch::Contains("borrowed"));
    t.own_data();  // every handle follows, with the values it had
    host.assign(6, -1.0f);
    CHECK(view.to_vector<float>() == std::vector<float>{4, 3, 2, 1});
    CHECK(memory_usage(DeviceType::cpu).total_live == live + 24);
  }
  CHECK(memory_usage(DeviceType::cpu).total_live == live);
  CHECK(host[0] == -1.0f);  // never freed or written after own_data
  REQUIRE_THROWS_WITH(Tensor::borrowed(nullptr, {2}, DType::f32, be), Catch::Contains("the pointer is null"));
}
