// bench_ladder: the optimisation ladder (a thin main over the bench library).
//   bench_ladder --plan                      the baseline's profile and which rung it points to
//   bench_ladder --device cpu --repeats 3 [--calibrate] [--quick] [--trace] [--data DIR] [--model NAME]
// Rows go to results/ledger_<device>.jsonl; REPORT.md is regenerated from the ledger afterwards.
// --model (and --model-options) replace the ladder file's model for every rung; a rung whose knob does
// nothing for that model (channels_last for an MLP) is skipped with the reason, never failed.
#include <cstdio>
#include <iostream>

#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "backends/error.h"
#include "backends/registry.h"
#include "bench/measure/data_source.h"
#include "bench/measure/ledger.h"
#include "bench/report/report.h"
#include "engine/io/fileio.h"
#include "engine/train/task.h"
#include "studies/ladder/ladder.h"
#include "studies/registry.h"

int main(int argc, char** argv) {
  using namespace trainlab;
  CLI::App app{"bench_ladder: the optimisation ladder, one knob per rung, measured honestly", "bench_ladder"};
  std::string device = "cpu", config_path, ledger_path, report_path = "results/REPORT.md", data;
  int repeats = 3;
  bool calibrate = false, quick = false, plan = false, trace = false, no_report = false;
  app.add_option("--device", device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--config", config_path, "ladder YAML (default configs/ladder_<device>.yaml)");
  app.add_option("--repeats", repeats, "interleaved repeats per rung [1..100]")->check(FiniteRange(1, 100));
  app.add_flag("--calibrate", calibrate, "add two secretly identical arms; their gap is the noise floor");
  app.add_flag("--quick", quick, "fewer measured steps per repeat");
  app.add_flag("--plan", plan, "profile the baseline and print which rung the largest stall points to");
  app.add_flag("--trace", trace, "a Chrome trace of each rung's first repeat under results/traces/");
  app.add_option("--data", data,
                 "a data set on disk (trainlab make-dataset) for every rung instead of the ladder file's (its data: "
                 "key, else SyntheticImages with decode_cost); its decoding is then the data wait");
  ModelConfig model;
  const ModelFlags model_flags = add_model_options(
      app, model, "the model every rung trains, in place of the ladder file's (its model: key, else smallcnn)");
  app.add_option("--ledger", ledger_path, "ledger file (default results/ledger_<device>.jsonl)")->check(NonEmptyPath());
  app.add_option("--report", report_path, "REPORT.md to regenerate after the run");
  app.add_flag("--no-report", no_report, "do not regenerate the report");
  if (const auto status = parse_command_line(app, argc, argv, "bench_ladder")) return *status;
  try {
    if (config_path.empty()) config_path = "configs/ladder_" + device + ".yaml";
    bench::LadderSpec spec = bench::load_ladder(config_path);
    if (model_flags.given()) bench::use_model(spec.base, model);
    if (!data.empty()) {
      bench::use_data_set(spec.base, data);
      bench::data_source_of_dir(data);  // a directory that is not a data set is named now
    }
    // Every rung still a valid config, and the model built for the data (its keys' values, the data's
    // sample shape), refused now rather than as a failed row per rung.
    if (model_flags.given() || !data.empty()) (void)model_task(bench::rung_configs(spec).front());
    TL_CHECK(spec.device == device, config_path + " is the '" + spec.device + "' ladder, not '" + device + "'");
    if (device == "cuda") {
      bool any = false;
      for (const auto& info : registered_backends()) any = any || info.device_type == DeviceType::cuda;
      TL_CHECK(any, "no CUDA backend in this build (registered: " + registered_backend_names() +
                        "); build with -DTRAINLAB_CUDA=ON on a machine with a GPU");
    }
    if (plan) {
      std::cout << bench::plan_ladder(spec, quick);
      return 0;
    }
    // The outputs, before any measurement: a report path that is a directory, or a ledger that is
    // not a regular file, is refused now rather than after the run.
    if (!no_report) check_output_file(report_path, "--report");
    bench::Ledger(ledger_path.empty() ? bench::default_ledger_path(device) : ledger_path).load();
    bench::LadderOptions options;
    options.repeats = repeats;
    options.quick = quick;
    options.calibrate = calibrate;
    options.trace = trace;
    options.ledger_path = ledger_path;
    options.log = &std::cout;
    const bench::LadderRun run = bench::run_ladder(spec, options);
    std::cout << "\n" << bench::ladder_table(run.rung_rows, false);
    if (!no_report) {
      bench::ReportOptions report;
      report.ledger_path = run.ledger_path;
      report.out_path = report_path;
      report.run_id = run.run_id;
      bench::write_report(report, bench::report_sections());
      std::cout << "report: " << report_path << " (from " << run.ledger_path << ", run " << run.run_id << ")\n";
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_ladder: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ladder: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
