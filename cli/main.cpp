// servelab: one binary, one subcommand per file in cli/.
#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"servelab: benchmark and load-test LLM serving"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
