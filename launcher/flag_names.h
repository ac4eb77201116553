// Lets users write flags with dashes (--batch-size), as the docs do, while
// Abseil names them with underscores (batch_size).
#ifndef HETERODL_LAUNCHER_FLAG_NAMES_H_
#define HETERODL_LAUNCHER_FLAG_NAMES_H_

#include <string>
#include <vector>

namespace heterodl {

// Rewrites "--foo-bar[=v]" to "--foo_bar[=v]" in place, up to a bare "--"
// (what follows it is not ours to touch). Values are left alone.
inline void NormalizeFlagNames(std::vector<std::string>& arguments) {
  for (std::string& argument : arguments) {
    if (argument == "--") return;
    if (argument.size() < 3 || argument[0] != '-') continue;
    const size_t start = argument[1] == '-' ? 2 : 1;
    const size_t end = std::min(argument.find('='), argument.size());
    for (size_t i = start; i < end; ++i) {
      if (argument[i] == '-') argument[i] = '_';
    }
  }
}

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_FLAG_NAMES_H_
