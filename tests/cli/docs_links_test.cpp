// The README and docs link only inside the repository: every link in README.md, docs/*.md and
// scenarios/README.md names a file or folder of this checkout (and a heading of it, when it has
// an #anchor), so a fresh clone has no dead or outside links.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace servelab {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// GitHub's anchor of a heading: lower case, spaces to '-', punctuation dropped.
std::string heading_anchor(const std::string& heading) {
  std::string out;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80) out += static_cast<char>(std::tolower(c));
    else if (c == ' ') out += '-';
  }
  return out;
}

std::set<std::string> anchors_of(const std::string& markdown) {
  std::set<std::string> out;
  std::istringstream in(markdown);
  bool fenced = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    if (fenced || line.empty() || line[0] != '#') continue;
    const size_t start = line.find_first_not_of('#');
    if (start == std::string::npos || line[start] != ' ') continue;
    out.insert(heading_anchor(line.substr(start + 1)));
  }
  return out;
}

/// Link targets of a Markdown text outside code blocks and code spans: [text](target),
/// ![alt](target), [ref]: target, href="target" and src="target".
std::vector<std::string> link_targets(const std::string& markdown) {
  std::vector<std::string> out;
  static const std::regex inline_link(R"(\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\))");
  static const std::regex ref_link(R"(^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$))");
  static const std::regex html_link(R"((?:href|src)\s*=\s*["']([^"']+)["'])");
  static const std::regex code_span("`[^`]*`");
  std::istringstream in(markdown);
  bool fenced = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("```") != std::string::npos && line.find_first_not_of(' ') == line.find("```")) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    line = std::regex_replace(line, code_span, "``");
    for (const std::regex* re : {&inline_link, &ref_link, &html_link})
      for (std::sregex_iterator it(line.begin(), line.end(), *re), end; it != end; ++it) out.push_back((*it)[1]);
  }
  return out;
}

/// Problems with the links of `file` (a Markdown file inside `root`), one message each.
std::vector<std::string> link_problems(const fs::path& root, const fs::path& file) {
  std::vector<std::string> problems;
  const std::string name = fs::relative(file, root).string();
  const fs::path canonical_root = fs::weakly_canonical(root);
  for (const std::string& target : link_targets(read_text(file))) {
    auto problem = [&](const std::string& why) { problems.push_back(name + ": link '" + target + "' " + why); };
    if (std::regex_search(target, std::regex("^[A-Za-z][A-Za-z0-9+.-]*:")) || target.rfind("//", 0) == 0) {
      problem("leaves the repository (link to a file of this checkout instead)");
      continue;
    }
    const size_t hash = target.find('#');
    const std::string path_part = target.substr(0, hash);
    const std::string anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
    if (!path_part.empty() && path_part[0] == '/') {
      problem("is an absolute path (use a path relative to " + name + ")");
      continue;
    }
    const fs::path resolved = fs::weakly_canonical(path_part.empty() ? file : file.parent_path() / path_part);
    const std::string rel = fs::relative(resolved, canonical_root).string();
    if (rel == ".." || rel.rfind("../", 0) == 0) {
      problem("leaves the repository");
      continue;
    }
    if (!fs::exists(resolved)) {
      problem("names nothing in the repository");
      continue;
    }
    if (!anchor.empty() && resolved.extension() == ".md" && !anchors_of(read_text(resolved)).count(anchor))
      problem("names no heading '#" + anchor + "' of " + rel);
  }
  return problems;
}

std::vector<fs::path> documentation_files(const fs::path& root) {
  std::vector<fs::path> files = {root / "README.md", root / "scenarios" / "README.md"};
  if (fs::is_directory(root / "docs"))
    for (const auto& e : fs::directory_iterator(root / "docs"))
      if (e.path().extension() == ".md") files.push_back(e.path());
  return files;
}

TEST(DocsLinks, EveryLinkStaysInsideTheRepository) {
  const fs::path root = SERVELAB_SOURCE_DIR;
  const auto files = documentation_files(root);
  ASSERT_TRUE(fs::exists(root / "docs" / "metrics.md"));
  ASSERT_TRUE(fs::exists(root / "docs" / "design.md"));
  int n_links = 0;
  std::string all;
  for (const fs::path& f : files) {
    ASSERT_TRUE(fs::exists(f)) << f;
    n_links += static_cast<int>(link_targets(read_text(f)).size());
    for (const std::string& p : link_problems(root, f)) all += p + "\n";
  }
  EXPECT_GT(n_links, 10);
  EXPECT_EQ(all, "");
  // The README points newcomers at the definitions.
  const std::string readme = read_text(root / "README.md");
  EXPECT_NE(readme.find("](docs/metrics.md)"), std::string::npos);
  EXPECT_NE(readme.find("](docs/design.md)"), std::string::npos);
}

TEST(DocsLinks, CheckerCatchesOutsideMissingAndWebLinks) {
  std::string dir = (fs::path(::testing::TempDir()) / "servelab_docs_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const fs::path root = dir;
  fs::create_directories(root / "docs");
  std::ofstream(root / "docs" / "a.md") << "# Title\n\n## Two words\n";
  std::ofstream(root / "README.md")
      << "See [design](../shared/DESIGN.md), [a](docs/a.md#two-words), [b](docs/a.md#nope),\n"
         "[gone](docs/gone.md), ![img](https://example.com/x.png) and `[code](../not/a/link)`.\n"
         "```\n[fenced](../also/not)\n```\n[ref]: /etc/passwd\n<img src=\"docs/a.md\">\n";
  const auto problems = link_problems(root, root / "README.md");
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_EQ(all,
            "README.md: link '../shared/DESIGN.md' leaves the repository\n"
            "README.md: link 'docs/a.md#nope' names no heading '#nope' of docs/a.md\n"
            "README.md: link 'docs/gone.md' names nothing in the repository\n"
            "README.md: link 'https://example.com/x.png' leaves the repository (link to a file of this checkout instead)\n"
            "README.md: link '/etc/passwd' is an absolute path (use a path relative to README.md)\n");
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
}  // namespace servelab
