// SyntheticImages and the DataLoader: determinism per (seed, index), the decode cost, batch order
// independent of workers, epochs, positions, and errors.
#include "engine/data/loader.h"
#include "test_util.h"
#include "tests/emulated_device.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {
std::vector<float> sample(const SyntheticImages& data, std::int64_t index, std::int64_t* label = nullptr,
                          double* checksum = nullptr) {
  std::vector<float> image(SyntheticImages::kSampleElements);
  const std::int64_t l = data.get(index, image.data(), checksum);
  if (label) *label = l;
  return image;
}
}  // namespace

TEST_CASE("SyntheticImages: a pure function of (seed, split, index)", "[data]") {
  const SyntheticImages a(7, Split::train, 100), b(7, Split::train, 100), other_seed(8, Split::train, 100);
  const SyntheticImages held_out(7, Split::held_out, 100);
  std::int64_t la, lb;
  CHECK(sample(a, 13, &la) == sample(b, 13, &lb));
  CHECK(la == lb);
  CHECK(sample(a, 13) != sample(a, 14));
  CHECK(sample(a, 13) != sample(other_seed, 13));
  CHECK(sample(a, 13) != sample(held_out, 13));  // the held-out split draws different samples
  // Reading out of order gives the same bytes.
  const auto late = sample(a, 99);
  sample(a, 0);
  CHECK(sample(a, 99) == late);
  // Labels cover the classes.
  std::vector<int> counts(10, 0);
  for (std::int64_t i = 0; i < 100; ++i) {
    std::int64_t l;
    sample(a, i, &l);
    REQUIRE(l >= 0);
    REQUIRE(l < 10);
    ++counts[static_cast<std::size_t>(l)];
  }
  // 100 draws over 10 classes: every class appears, none dominates (binomial, p = 0.1: 1..25 is
  // beyond 5 standard deviations on either side).
  for (int c : counts) {
    CHECK(c >= 1);
    CHECK(c <= 25);
  }
  REQUIRE_THROWS_CONTAINING(sample(a, 100), "index 100", "[0, 100)");
  REQUIRE_THROWS_CONTAINING(SyntheticImages(0, Split::train, 0), "size must be >= 1");
}

TEST_CASE("SyntheticImages: decode_cost does real work and leaves the pixels alone", "[data]") {
  const SyntheticImages cheap(3, Split::train, 10, 0), costly(3, Split::train, 10, 5), costlier(3, Split::train, 10, 6);
  double c0 = -1, c5 = 0, c6 = 0;
  const auto img0 = sample(cheap, 4, nullptr, &c0);
  CHECK(img0 == sample(costly, 4, nullptr, &c5));
  sample(costlier, 4, nullptr, &c6);
  CHECK(c0 == 0.0);
  CHECK(c5 != 0.0);
  CHECK(c5 != c6);  // each pass feeds the next
}

TEST_CASE("DataLoader: batches are identical whatever the worker count", "[data]") {
  auto data = std::make_shared<SyntheticImages>(5, Split::train, 70, 2);
  auto collect = [&](int workers, int prefetch, bool persistent) {
    DataLoaderOptions o;
    o.batch_size = 16;
    o.num_workers = workers;
    o.prefetch = prefetch;
    o.persistent_workers = persistent;
    o.seed = 11;
    DataLoader loader(data, o, ref());
    std::vector<Batch> batches;
    for (int i = 0; i < 13; ++i) batches.push_back(loader.next());  // 4 batches an epoch: crosses 3 epochs
    return batches;
  };
  const auto baseline = collect(0, 1, false);
  CHECK(baseline[0].inputs.shape() == Shape{16, 3, 32, 32});
  CHECK(baseline[4].epoch == 1);
  CHECK(baseline[4].index == 0);
  for (auto [workers, prefetch, persistent] :
       {std::tuple{1, 1, false}, std::tuple{2, 2, false}, std::tuple{3, 1, true}, std::tuple{4, 3, true}}) {
    INFO("workers " << workers << " prefetch " << prefetch << " persistent " << persistent);
    const auto other = collect(workers, prefetch, persistent);
    for (std::size_t i = 0; i < baseline.size(); ++i) {
      CHECK(bitwise_equal(baseline[i].inputs, other[i].inputs));
      CHECK(bitwise_equal(baseline[i].labels, other[i].labels));
      CHECK(baseline[i].decode_checksum == other[i].decode_checksum);
    }
  }
}

TEST_CASE("DataLoader: each epoch is a fresh permutation of the whole dataset", "[data]") {
  auto data = std::make_shared<SyntheticImages>(5, Split::train, 40);
  DataLoaderOptions o;
  o.batch_size = 8;
  o.seed = 3;
  DataLoader loader(data, o, ref());
  CHECK(loader.batches_per_epoch() == 5);
  std::vector<std::int64_t> epoch0, epoch1;
  for (std::int64_t b = 0; b < 5; ++b) {
    for (auto i : loader.batch_indices(0, b)) epoch0.push_back(i);
    for (auto i : loader.batch_indices(1, b)) epoch1.push_back(i);
  }
  CHECK(epoch0 != epoch1);
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  for (std::int64_t i = 0; i < 40; ++i) {
    CHECK(epoch0[static_cast<std::size_t>(i)] == i);
    CHECK(epoch1[static_cast<std::size_t>(i)] == i);
  }
  // drop_last off keeps the ragged last batch.
  DataLoaderOptions ragged = o;
  ragged.batch_size = 15;
  ragged.drop_last = false;
  DataLoader r(data, ragged, ref());
  CHECK(r.batches_per_epoch() == 3);
  r.next();
  r.next();
  CHECK(r.next().inputs.size(0) == 10);
  // Without shuffle, the order is the identity.
  DataLoaderOptions ordered = o;
  ordered.shuffle = false;
  CHECK(DataLoader(data, ordered, ref()).batch_indices(2, 1) ==
        std::vector<std::int64_t>{8, 9, 10, 11, 12, 13, 14, 15});
}

TEST_CASE("DataLoader: a restored position continues the same stream", "[data]") {
  auto data = std::make_shared<SyntheticImages>(5, Split::train, 48);
  DataLoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 2;
  o.seed = 9;
  DataLoader straight(data, o, ref());
  std::vector<Batch> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(straight.next());

  DataLoader first(data, o, ref());
  for (int i = 0; i < 4; ++i) first.next();
  const StateDict state = first.state_dict();
  DataLoader resumed(data, o, ref());
  resumed.load_state_dict(state);
  CHECK(resumed.position().epoch == 0);
  CHECK(resumed.position().next_batch == 4);
  for (int i = 4; i < 10; ++i)
    CHECK(bitwise_equal(resumed.next().inputs, expected[static_cast<std::size_t>(i)].inputs));

  DataLoaderOptions other = o;
  other.batch_size = 16;
  DataLoader mismatched(data, other, ref());
  REQUIRE_THROWS_CONTAINING(mismatched.load_state_dict(state), "batch_size was 8", "16");
  REQUIRE_THROWS_CONTAINING(resumed.set_position({0, 6}), "an epoch has 6 batches");
}

TEST_CASE("DataLoader: bad options are refused", "[data]") {
  auto data = std::make_shared<SyntheticImages>(5, Split::train, 10);
  DataLoaderOptions o;
  o.batch_size = 11;
  REQUIRE_THROWS_CONTAINING(DataLoader(data, o, ref()), "10 samples make no full batch of 11");
  o.batch_size = 0;
  REQUIRE_THROWS_CONTAINING(DataLoader(data, o, ref()), "batch_size must be >= 1");
  o.batch_size = 2;
  o.prefetch = 0;
  REQUIRE_THROWS_CONTAINING(DataLoader(data, o, ref()), "prefetch must be >= 1");
}

TEST_CASE("DataLoader: pin_memory delivers the same batches, copied late on a copy stream", "[data]") {
  // The emulated device copies an upload only when the compute stream waits for it (or on a
  // later poll): a pinned block reused too early, or a batch handed out before its wait, would
  // arrive with the wrong bytes.
  auto data = std::make_shared<SyntheticImages>(5, Split::train, 70, 2);
  Backend& device = get_backend(testing::emulated_device());
  DataLoaderOptions o;
  o.batch_size = 16;
  o.seed = 11;
  std::vector<Batch> expected;
  {
    DataLoader pageable(data, o, ref());
    for (int i = 0; i < 13; ++i) expected.push_back(pageable.next());  // crosses 3 epochs
  }
  for (auto [workers, prefetch, persistent] :
       {std::tuple{0, 1, false}, std::tuple{2, 2, false}, std::tuple{3, 1, true}, std::tuple{1, 3, true}}) {
    INFO("workers " << workers << " prefetch " << prefetch << " persistent " << persistent);
    {
      DataLoaderOptions p = o;
      p.pin_memory = true;
      p.num_workers = workers;
      p.prefetch = prefetch;
      p.persistent_workers = persistent;
      DataLoader pinned(data, p, device);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("batch " << i);
        const Batch got = pinned.next();  // checked at once: it must be on the device when handed out
        CHECK(bitwise_equal(got.inputs, expected[i].inputs));
        CHECK(bitwise_equal(got.labels, expected[i].labels));
        CHECK(got.decode_checksum == expected[i].decode_checksum);
        CHECK(got.epoch == expected[i].epoch);
        if (i == 6) pinned.set_position({1, 3});  // drops a staged batch; the stream goes on from batch 7
      }
      // Blocks are reused: the pool holds what is in flight, not one block per batch.
      CHECK(device.counters()["pinned_blocks"] <= workers * prefetch + 3);
    }
    CHECK(device.counters()["pinned_blocks"] == 0);  // all returned when the loader goes
    CHECK(device.counters()["uploads_pending"] == 0);
  }
  o.pin_memory = true;
  REQUIRE_THROWS_CONTAINING(DataLoader(data, o, ref()), "pin_memory needs a backend with page-locked host memory",
                            "'reference' has none");
}

TEST_CASE("DataLoader: the distributed sampler's shards are disjoint and together the whole batch", "[data]") {
  // In one process (the MPI tests check it across ranks): rank r of n takes the r-th of n equal
  // parts of each global batch, every rank drawing the same permutation.
  auto data = std::make_shared<SyntheticImages>(3, Split::train, 50);
  DataLoaderOptions whole;
  whole.batch_size = 12;
  whole.seed = 9;
  const DataLoader one(data, whole, ref());
  for (int shards : {2, 3, 4}) {
    std::vector<std::unique_ptr<DataLoader>> parts;
    for (int r = 0; r < shards; ++r) {
      DataLoaderOptions o = whole;
      o.shard_rank = r;
      o.shard_count = shards;
      parts.push_back(std::make_unique<DataLoader>(data, o, ref()));
    }
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      for (std::int64_t b = 0; b < one.batches_per_epoch(); ++b) {
        INFO(shards << " shards, epoch " << epoch << ", batch " << b);
        std::vector<std::int64_t> joined;
        for (const auto& part : parts) {
          const auto idx = part->batch_indices(epoch, b);
          CHECK(idx.size() == static_cast<std::size_t>(12 / shards));
          joined.insert(joined.end(), idx.begin(), idx.end());
        }
        CHECK(joined == one.batch_indices(epoch, b));  // complete, in order, hence disjoint
        std::sort(joined.begin(), joined.end());
        CHECK(std::adjacent_find(joined.begin(), joined.end()) == joined.end());
      }
    }
  }
  // A batch that does not split over the ranks is refused, naming both.
  DataLoaderOptions uneven = whole;
  uneven.shard_count = 5;
  REQUIRE_THROWS_CONTAINING(DataLoader(data, uneven, ref()), "global batch 12", "5 ranks");
}
