#pragma once
// Subcommand registry: each cli/*_cmd.cpp registers itself with a static Registrar, so adding a
// subcommand touches no other file. A command's setup adds its flags to its CLI11 subcommand and
// returns the function main() runs when that subcommand is chosen; it returns the exit code
// (0 ok, 1 a CI gate failed, 2 bad usage / invalid scenario / bad input file).
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace servelab::cli {

using CommandMain = std::function<int()>;
using CommandSetup = std::function<CommandMain(CLI::App& sub)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<CommandInfo>& commands();

struct Registrar {
  Registrar(std::string name, std::string description, CommandSetup setup) {
    commands().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace servelab::cli
