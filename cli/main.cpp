// servelab: one binary, one subcommand per file in cli/ (see command.h).
#include <algorithm>
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "cli/command.h"

namespace servelab::cli {
std::vector<CommandInfo>& commands() {
  static std::vector<CommandInfo> list;
  return list;
}
}  // namespace servelab::cli

int main(int argc, char** argv) {
  using namespace servelab::cli;
  CLI::App app{"servelab: benchmark and load-test LLM serving, with a real reference engine"};
  app.set_version_flag("--version", std::string("servelab ") + SERVELAB_VERSION);
  app.require_subcommand(1);
  auto& list = commands();
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, CommandMain> mains;
  for (auto& c : list) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    mains[sub] = c.setup(*sub);
  }
  // CLI11 alone answers an unknown first word with "A subcommand is required": name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    const bool known = std::any_of(list.begin(), list.end(), [&](const auto& c) { return c.name == word; });
    if (!known) {
      std::cerr << "servelab: unknown command '" << word << "' (commands:";
      for (const auto& c : list) std::cerr << " " << c.name;
      std::cerr << "); see servelab --help\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // The deepest chosen subcommand with a registered main runs.
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = mains.find(sub);
    if (it == mains.end() || !it->second) continue;
    try {
      return it->second();
    } catch (const std::exception& e) {
      std::cerr << "servelab " << sub->get_name() << ": error: " << e.what() << "\n";
      return 2;
    }
  }
  std::cerr << app.help();
  return 2;
}
