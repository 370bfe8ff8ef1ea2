// servelab plan SCENARIO [--rate R] [--set ...] [--json]: shows the requests a run would send.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "loadgen/plan.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

const Registrar kPlan(
    "plan", "Show the seeded request plan of a scenario (counts, gaps, lengths) without running it",
    [](CLI::App& sub) -> CommandMain {
      struct Opts {
        std::string file;
        std::vector<std::string> sets;
        double rate = 0.0;
        bool json = false;
      };
      auto o = std::make_shared<Opts>();
      sub.add_option("scenario", o->file, "scenario YAML file")->required();
      sub.add_option("--rate", o->rate, "plan only this rate (requests/s); default: every rate of the sweep")
          ->check(CLI::PositiveNumber);
      sub.add_option("--set", o->sets, "override a value: key.path=value (repeatable)")->allow_extra_args(false);
      sub.add_flag("--json", o->json, "print the full plans (every request with its prompt token ids) as JSON");
      sub.footer(
          "Examples:\n"
          "  servelab plan scenarios/quick.yaml\n"
          "  servelab plan scenarios/quick.yaml --rate 4 --json > plan.json\n"
          "The same scenario, seed and rate always give the same plan.\n");
      return [o]() -> int {
        try {
          const Scenario s = load_scenario(o->file, o->sets);
          const Planner planner(s);
          std::vector<double> rates = s.sweep_rates();
          if (o->rate > 0) {
            if (s.workload.mode != LoadMode::open_loop)
              std::cerr << "note: --rate is ignored for " << to_string(s.workload.mode) << " workloads\n";
            else
              rates = {o->rate};
          }
          nlohmann::json plans = nlohmann::json::array();
          for (double r : rates) {
            const Plan plan = planner.make(r);
            if (o->json) plans.push_back(plan_to_json(plan));
            else std::cout << format_plan_summary(plan, s.name);
          }
          if (o->json) std::cout << nlohmann::json{{"scenario", s.name}, {"plans", plans}}.dump() << "\n";
          return 0;
        } catch (const ScenarioError& e) {
          for (const auto& m : e.messages) std::cerr << m << "\n";
          return 2;
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
          return 2;
        }
      };
    });

}  // namespace
}  // namespace servelab::cli
