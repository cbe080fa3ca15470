// The comm layer's single-process parts: allreduce auto's thresholds (the choice by size, the
// thresholds derived from measured medians, the tuning file's round trip and merge, every bad file
// refused in one line naming it) and the hosts line.
#include <catch2/catch.hpp>

#include <fstream>
#include <limits>

#include "backends/error.h"
#include "comm/tuning.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::comm;

namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

TuningPoint point(std::int64_t bytes, double ring_us, double doubling_us, double halving_us) {
  TuningPoint p;
  p.bytes = bytes;
  p.median_s = {
      {"ring", ring_us * 1e-6}, {"recursive_doubling", doubling_us * 1e-6}, {"halving_doubling", halving_us * 1e-6}};
  return p;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The error read_tuning gives for a file holding `text`: one line, naming the file.
std::string refusal(const std::string& path, const std::string& text) {
  write_text(path, text);
  try {
    read_tuning(path);
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find(path) != std::string::npos);
    return what;
  }
  FAIL("accepted: " << text);
  return "";
}

}  // namespace

TEST_CASE("allreduce auto chooses by size from its thresholds; the others are what they say", "[comm-unit]") {
  AlgorithmThresholds t;
  t.recursive_doubling_below = 8 << 10;
  t.ring_from = 32 << 20;
  CHECK(choose_algorithm(Algorithm::automatic, 4096, t) == Algorithm::recursive_doubling);
  CHECK(choose_algorithm(Algorithm::automatic, 8 << 10, t) == Algorithm::halving_doubling);
  CHECK(choose_algorithm(Algorithm::automatic, (32 << 20) - 4, t) == Algorithm::halving_doubling);
  CHECK(choose_algorithm(Algorithm::automatic, 32 << 20, t) == Algorithm::ring);
  t.ring_from = kNever;
  CHECK(choose_algorithm(Algorithm::automatic, std::int64_t{1} << 40, t) == Algorithm::halving_doubling);
  for (Algorithm a : {Algorithm::ring, Algorithm::native, Algorithm::recursive_doubling, Algorithm::halving_doubling})
    CHECK(choose_algorithm(a, 4096, t) == a);
  // single_copy needs its data in a window (DDP's buckets): a free collective runs the ring.
  CHECK(choose_algorithm(Algorithm::single_copy, 4096, t) == Algorithm::ring);
  CHECK(parse_algorithm("single_copy") == Algorithm::single_copy);
  CHECK(parse_algorithm("auto") == Algorithm::automatic);
  CHECK(std::string(algorithm_name(Algorithm::halving_doubling)) == "halving_doubling");
  CHECK_THROWS_WITH(parse_algorithm("tree"),
                    Catch::Contains("allowed: ring, recursive_doubling, halving_doubling, single_copy, auto, native"));
  CHECK(describe_thresholds(t) ==
        "recursive doubling below 8K, halving-doubling from 8K; single-copy at every size in a shared window "
        "(built-in)");
  CHECK(describe_thresholds(AlgorithmThresholds{}) ==
        "recursive doubling below 8K, halving-doubling from 8K below 32M, ring from 32M; single-copy at every size "
        "in a shared window (built-in)");
  CHECK(describe_thresholds({0, 0, kNever, "f"}) == "ring at every size; single-copy never (f)");
  CHECK(describe_thresholds({0, 1 << 20, 64 << 10, "f"}) ==
        "halving-doubling below 1M, ring from 1M; single-copy from 64K in a shared window (f)");
  CHECK(describe_thresholds({kNever, kNever, kNever, "f"}) ==
        "recursive doubling at every size; single-copy never (f)");
  CHECK(describe_thresholds({4096, 4096, kNever, "f"}) ==
        "recursive doubling below 4K, ring from 4K; single-copy never (f)");
}

TEST_CASE("tuning: thresholds from the medians, boundaries between the sizes, disagreements named", "[comm-unit]") {
  // Recursive doubling wins 4K and 16K, halving-doubling the middle but for a ring win at 256K, the ring
  // 16M and 64M.
  std::vector<TuningPoint> points = {point(64 << 20, 10, 30, 12),      point(4 << 10, 5, 3, 4),
                                     point(16 << 10, 8, 6, 7),         point(64 << 10, 20, 22, 18),
                                     point(256 << 10, 50, 70, 55),     point(4 << 20, 900, 1200, 800),
                                     point(16 << 20, 3000, 4000, 3100)};
  std::vector<std::string> disagreements;
  const TuningEntry e = derive_thresholds(2, points, &disagreements);
  CHECK(e.world == 2);
  CHECK(e.recursive_doubling_below == 32 << 10);  // between 16K and 64K
  CHECK(e.ring_from == 8 << 20);                  // between 4M and 16M
  REQUIRE(e.measured.size() == 7);
  CHECK(e.measured.front().bytes == 4 << 10);  // sorted
  CHECK(e.measured.front().best == "recursive_doubling");
  REQUIRE(disagreements.size() == 1);
  CHECK_THAT(disagreements[0], Catch::Contains("at 262144 bytes ring was fastest (50.0 us)") &&
                                   Catch::Contains("halving_doubling (55.0 us, +10.0%)"));
  // The ring everywhere: it takes every size; recursive doubling everywhere: the ring never.
  const TuningEntry ring = derive_thresholds(4, {point(4096, 1, 2, 2), point(1 << 20, 1, 2, 2)}, nullptr);
  CHECK(ring.recursive_doubling_below == 0);
  CHECK(ring.ring_from == 0);
  const TuningEntry doubling = derive_thresholds(4, {point(4096, 2, 1, 2), point(1 << 20, 2, 1, 2)}, nullptr);
  CHECK(doubling.recursive_doubling_below == kNever);
  CHECK(doubling.ring_from == kNever);
  CHECK_THROWS_WITH(derive_thresholds(2, {}, nullptr), Catch::Contains("no sizes measured"));
  CHECK(e.single_copy_from == kNever);  // not measured: never
  // single_copy timed (a shared window): from where it takes the least time to the largest size; the
  // three's thresholds are the path without a window, as before.
  std::vector<TuningPoint> window = points;
  for (TuningPoint& p : window) p.median_s["single_copy"] = p.bytes >= (64 << 10) ? 1e-9 : 1.0;
  window[2].median_s["single_copy"] = 1e-9;  // 16K won, 4K lost: the run starts at 16K
  const TuningEntry w = derive_thresholds(2, window, nullptr);
  CHECK(w.single_copy_from == 8 << 10);  // between 4K and 16K
  CHECK(w.recursive_doubling_below == e.recursive_doubling_below);
  CHECK(w.ring_from == e.ring_from);
  // A near-tie lost at 4M (inside its range) does not move it: a disagreement, named.
  window[5].median_s["single_copy"] = 801e-6;
  std::vector<std::string> lost;
  CHECK(derive_thresholds(2, window, &lost).single_copy_from == 8 << 10);
  REQUIRE(lost.size() == 2);  // and the ring's win at 256K
  CHECK_THAT(lost.front(), Catch::Contains("at 4194304 bytes halving_doubling was fastest (800.0 us); the thresholds "
                                           "give single_copy (801.0 us, +0.1%)"));
  window[0].median_s["single_copy"] = 1.0;  // it loses the largest size by far: never
  CHECK(derive_thresholds(2, window, nullptr).single_copy_from == kNever);
  for (TuningPoint& p : window) p.median_s["single_copy"] = 1e-9;  // it wins every size: from 0
  CHECK(derive_thresholds(2, window, nullptr).single_copy_from == 0);
}

TEST_CASE("tuning: the file round-trips, merges by world size, and feeds thresholds_for", "[comm-unit]") {
  test::TempDir dir("tuning");
  const std::string path = (dir.path / "tuning.json").string();
  TuningEntry two =
      derive_thresholds(2, {point(4096, 5, 3, 4), point(1 << 20, 200, 300, 180), point(64 << 20, 9, 30, 12)}, nullptr);
  two.run_id = "RUN2";
  two.communicator = "mpi";
  two.library = "Open MPI v4.1.4";
  TuningFile file;
  merge_entry(file, two);
  write_tuning(path, file);
  TuningFile back = read_tuning(path);
  REQUIRE(back.entries.size() == 1);
  CHECK(back.entries[0].world == 2);
  CHECK(back.entries[0].recursive_doubling_below == two.recursive_doubling_below);
  CHECK(back.entries[0].ring_from == two.ring_from);
  CHECK(back.entries[0].single_copy_from == kNever);
  CHECK(read_text(path).find("\"single_copy_from\": null") != std::string::npos);
  CHECK(back.entries[0].run_id == "RUN2");
  CHECK(back.entries[0].library == "Open MPI v4.1.4");
  REQUIRE(back.entries[0].measured.size() == 3);
  CHECK(back.entries[0].measured[1].best == "halving_doubling");
  CHECK(back.entries[0].measured[1].median_s.at("halving_doubling") == Approx(180e-6));

  // Another world adds an entry; the same world replaces its own. "never" travels as null.
  TuningEntry four = derive_thresholds(4, {point(4096, 2, 1, 2)}, nullptr);
  merge_entry(back, four);
  two.recursive_doubling_below = 1234;
  merge_entry(back, two);
  write_tuning(path, back);
  CHECK(read_text(path).find("\"ring_from\": null") != std::string::npos);
  const TuningFile merged = read_tuning(path);
  REQUIRE(merged.entries.size() == 2);
  CHECK(merged.entries[0].recursive_doubling_below == 1234);
  CHECK(merged.entries[1].world == 4);
  CHECK(merged.entries[1].ring_from == kNever);

  const AlgorithmThresholds t2 = thresholds_for(path, 2, nullptr);
  CHECK(t2.recursive_doubling_below == 1234);
  CHECK(t2.single_copy_from == kNever);  // the file measured no window: never
  CHECK(t2.source == path + ", world 2, run RUN2");
  std::string note;
  const AlgorithmThresholds t8 = thresholds_for(path, 8, &note);
  CHECK(t8.recursive_doubling_below == AlgorithmThresholds{}.recursive_doubling_below);
  CHECK_THAT(note, Catch::Contains("no entry for world 8 (it has: 2, 4)"));
  CHECK(thresholds_for("", 2, nullptr).source == "built-in");

  // A file with no entries (issue 49): auto says what it uses instead, the built-in thresholds.
  write_tuning(path, TuningFile{});
  const AlgorithmThresholds none = thresholds_for(path, 2, &note);
  CHECK(none.ring_from == AlgorithmThresholds{}.ring_from);
  CHECK_THAT(note, Catch::Contains("no entry for world 2 (it has: none); the built-in thresholds apply"));
  CHECK_THAT(describe_thresholds(none), Catch::Contains("(built-in; " + path + " has no entry for world 2)"));
}

TEST_CASE("tuning: a bad file is one line naming the file and the value; another file is never replaced",
          "[comm-unit]") {
  test::TempDir dir("tuning-bad");
  const std::string path = (dir.path / "t.json").string();
  const std::string head = std::string("{\"format\": \"") + kTuningFormat + "\", \"entries\": [";
  CHECK_THAT(refusal(path, "{not json"), Catch::Contains("not JSON"));
  CHECK_THAT(refusal(path, "{\"format\": \"other/2\", \"entries\": []}"),
             Catch::Contains("not a trainlab all-reduce tuning file (format \"other/2\""));
  CHECK_THAT(refusal(path, head.substr(0, head.size() - 14) + "}"), Catch::Contains("\"entries\" is missing"));
  CHECK_THAT(refusal(path, head + "{\"world\": 2, \"recursive_doubling_below\": -1, \"ring_from\": 8}]}"),
             Catch::Contains("entry 0 (world 2): \"recursive_doubling_below\" is -1, not a whole number"));
  CHECK_THAT(refusal(path, head + "{\"world\": 2, \"recursive_doubling_below\": 4096, \"ring_from\": \"1M\"}]}"),
             Catch::Contains("\"ring_from\" is \"1M\"") && Catch::Contains("or null"));
  CHECK_THAT(refusal(path, head + "{\"world\": 2, \"recursive_doubling_below\": 65536, \"ring_from\": 4096}]}"),
             Catch::Contains("ring_from 4096 is below recursive_doubling_below 65536"));
  CHECK_THAT(refusal(path, head + "{\"world\": 0, \"recursive_doubling_below\": 1, \"ring_from\": 2}]}"),
             Catch::Contains("\"world\" is 0"));
  CHECK_THAT(refusal(path, head + "{\"recursive_doubling_below\": 1, \"ring_from\": 2}]}"),
             Catch::Contains("has no \"world\""));
  const std::string entry = "{\"world\": 2, \"recursive_doubling_below\": 1, \"ring_from\": 2}";
  CHECK_THAT(refusal(path, head + entry + "," + entry + "]}"), Catch::Contains("world 2 has two entries"));
  CHECK_THROWS_WITH(read_tuning((dir.path / "missing.json").string()), Catch::Contains("missing.json"));
  CHECK_THROWS_WITH(thresholds_for(path, 2, nullptr), Catch::Contains("world 2 has two entries"));

  // A file that is not a tuning file is left as it was.
  const std::string notes = (dir.path / "notes.txt").string();
  write_text(notes, "my notes\n");
  CHECK_THROWS_WITH(write_tuning(notes, TuningFile{}), Catch::Contains("refusing to replace " + notes));
  CHECK(read_text(notes) == "my notes\n");
}

TEST_CASE("hosts summary: ranks grouped by host in order, runs of ranks joined", "[comm-unit]") {
  CHECK(hosts_summary({"a"}) == "1 rank on 1 host: a (rank 0)");
  CHECK(hosts_summary({"a", "a"}) == "2 ranks on 1 host: a (ranks 0-1)");
  CHECK(hosts_summary({"n1", "n1", "n2", "n2", "n1", "n1", "n3"}) ==
        "7 ranks on 3 hosts: n1 (ranks 0-1,4-5), n2 (ranks 2-3), n3 (rank 6)");
  CHECK(hosts_summary({"a", "b", "a", "b"}) == "4 ranks on 2 hosts: a (ranks 0,2), b (ranks 1,3)");
}
