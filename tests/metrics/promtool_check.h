// Prometheus's own linter (Debian's prometheus package) over an exposition:
// names, types, units and help as its conventions want them.
#ifndef HETERODL_TESTS_METRICS_PROMTOOL_CHECK_H_
#define HETERODL_TESTS_METRICS_PROMTOOL_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace heterodl {

inline bool HavePromtool() { return std::system("command -v promtool > /dev/null 2>&1") == 0; }

// What `promtool check metrics` says of `text` (nothing when it has no
// complaint), with its exit code appended when it failed.
inline std::string PromtoolComplaints(const std::string& text, const std::string& name) {
  const std::string path = std::string(testing::TempDir()) + "/" + name + ".txt";
  {
    std::ofstream file(path, std::ios::trunc);
    file << text;
  }
  const std::string command = "promtool check metrics < '" + path + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return "cannot run promtool";
  }
  std::string said;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    said += buffer;
  }
  const int code = pclose(pipe);
  return code == 0 ? said : said + "(exit " + std::to_string(code) + ")";
}

}  // namespace heterodl

#endif  // HETERODL_TESTS_METRICS_PROMTOOL_CHECK_H_
