// servelab validate SCENARIO [--set key.path=value]...: checks a scenario without running it.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "loadgen/plan.h"
#include "loadgen/scenario.h"
#include "loadgen/sweep.h"

namespace servelab::cli {
namespace {

const Registrar kValidate(
    "validate", "Check a scenario YAML (schema, ranges, files, datasets) without running it",
    [](CLI::App& sub) -> CommandMain {
      auto file = std::make_shared<std::string>();
      auto sets = std::make_shared<std::vector<std::string>>();
      auto schema_only = std::make_shared<bool>(false);
      sub.add_option("scenario", *file, "scenario YAML file")->required();
      sub.add_option("--set", *sets, "override a value before validation: key.path=value (repeatable)")
          ->allow_extra_args(false);
      sub.add_flag("--schema-only", *schema_only,
                   "check the file only, not whether it runs here (skips loading the model, the sim profile, "
                   "the GPU and the KV arenas): for a GPU scenario checked on a machine without one");
      sub.footer(
          "Examples:\n"
          "  servelab validate scenarios/quick.yaml\n"
          "  servelab validate scenarios/quick.yaml --set workload.rates=[1,2] --set strategies.0.kv.kind=naive\n"
          "Makes every check `run` makes before its first request: the scenario's schema and ranges, its\n"
          "files and datasets, then (unless --schema-only) the model's weights, the sim profile, the\n"
          "GPU and each strategy's KV arena, as the run would build them.\n"
          "Prints 'FILE: ok (...)' and exits 0, or every problem as FILE:LINE:COL: message and exits 2.\n");
      return [file, sets, schema_only]() -> int {
        try {
          const Scenario s = load_scenario(*file, *sets);
          std::string extra;
          if (s.workload.mode == LoadMode::trace || s.workload.prompt.from_dataset() || s.workload.output.from_dataset()) {
            // Loads the dataset or trace: its errors name file:line.
            const Plan plan = Planner(s).make(s.sweep_rates().front());
            extra = ", " + std::to_string(plan.n_measured()) + " requests planned";
            if (plan.n_dataset_dropped > 0)
              extra += " (" + std::to_string(plan.n_dataset_dropped) + " dataset entries too long for max_model_len)";
          }
          if (!*schema_only) {
            try {
              check_runnable(s);
            } catch (const std::exception& e) {
              std::cerr << *file << ": cannot run here: " << e.what() << "\n";
              return 2;
            }
          }
          std::cout << *file << ": ok (" << describe(s) << extra << ")\n";
          return 0;
        } catch (const ScenarioError& e) {
          for (const auto& m : e.messages) std::cerr << m << "\n";
          std::cerr << *file << ": " << e.messages.size() << " error" << (e.messages.size() == 1 ? "" : "s") << "\n";
          return 2;
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
          return 2;
        }
      };
    });

}  // namespace
}  // namespace servelab::cli
