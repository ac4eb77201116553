#include "launcher/command_line.h"

#include <algorithm>
#include <fstream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace heterodl {
namespace {

// How deep flag files may include flag files: deeper is a loop.
constexpr int kMaxFlagFileDepth = 10;

// The part of a flag argument between its dashes and '=' ("" when it is not
// a flag: no leading dash, a lone "-" or "--").
absl::string_view FlagName(absl::string_view argument) {
  if (argument.size() < 2 || argument[0] != '-' || argument == "--") {
    return {};
  }
  argument.remove_prefix(argument[1] == '-' ? 2 : 1);
  return argument.substr(0, argument.find('='));
}

// Edits (insert, delete, substitute, swap two neighbours) from a to b:
// "trian" is one from "train".
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::vector<std::string> AllFlagNames() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    // Abseil's own and the test framework's flags are not ours to suggest.
    if (absl::StrContains(flag->Filename(), "absl/") && name != "flagfile") {
      continue;
    }
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status UnknownFlag(absl::string_view name) {
  const std::string nearest = NearestName(name, AllFlagNames());
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown flag ", DashedFlag(name),
      nearest.empty() ? "" : absl::StrCat(" (did you mean ", DashedFlag(nearest), "?)"),
      "; 'heterodl help COMMAND' lists a command's flags"));
}

// Parses `value` as `flag`'s type and puts the flag back as it was.
absl::Status CheckValue(absl::CommandLineFlag& flag, absl::string_view value) {
  const std::string before = flag.CurrentValue();
  std::string error;
  const bool parsed = flag.ParseFrom(value, &error);
  std::string ignored;
  flag.ParseFrom(before, &ignored);
  if (parsed) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value '", value, "' for ", DashedFlag(flag.Name()), ": ", error));
}

absl::Status ExpandInto(const std::vector<std::string>& arguments, size_t first, int depth,
                        std::vector<std::string>& out) {
  if (depth > kMaxFlagFileDepth) {
    return absl::InvalidArgumentError("flag files include each other in a loop");
  }
  for (size_t i = first; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--") {
      out.insert(out.end(), arguments.begin() + i, arguments.end());
      return absl::OkStatus();
    }
    if (FlagName(argument) != "flagfile") {
      out.push_back(argument);
      continue;
    }
    std::string path;
    if (const size_t equals = argument.find('='); equals != std::string::npos) {
      path = argument.substr(equals + 1);
    } else if (i + 1 < arguments.size()) {
      path = arguments[++i];
    }
    std::ifstream file(path);
    if (path.empty() || !file) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read the flag file '", path, "'"));
    }
    std::vector<std::string> lines;
    for (std::string line; std::getline(file, line);) {
      const absl::string_view text = absl::StripAsciiWhitespace(line);
      if (text.empty() || text[0] == '#') {
        continue;
      }
      // "--name value" as well as "--name=value".
      const size_t space = text.find_first_of(" \t");
      if (text[0] == '-' && space != absl::string_view::npos &&
          text.substr(0, space).find('=') == absl::string_view::npos) {
        lines.emplace_back(text.substr(0, space));
        lines.emplace_back(absl::StripLeadingAsciiWhitespace(text.substr(space)));
      } else {
        lines.emplace_back(text);
      }
    }
    NormalizeFlagNames(lines);
    absl::Status expanded = ExpandInto(lines, 0, depth + 1, out);
    if (!expanded.ok()) {
      return expanded;
    }
  }
  return absl::OkStatus();
}

}  // namespace

void NormalizeFlagNames(std::vector<std::string>& arguments) {
  for (std::string& argument : arguments) {
    if (argument == "--") {
      return;
    }
    if (argument.size() < 3 || argument[0] != '-') {
      continue;
    }
    const size_t start = argument[1] == '-' ? 2 : 1;
    const size_t end = std::min(argument.find('='), argument.size());
    for (size_t i = start; i < end; ++i) {
      if (argument[i] == '-') {
        argument[i] = '_';
      }
    }
    // "--no-pixel-channel" is Abseil's "--nopixel_channel".
    const absl::string_view name = absl::string_view(argument).substr(start, end - start);
    if (absl::StartsWith(name, "no_") && absl::FindCommandLineFlag(name) == nullptr) {
      const absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(3));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        argument.erase(start + 2, 1);
      }
    }
  }
}

absl::StatusOr<std::vector<std::string>> ExpandFlagFiles(
    const std::vector<std::string>& arguments) {
  std::vector<std::string> expanded;
  absl::Status status = ExpandInto(arguments, 0, 0, expanded);
  if (!status.ok()) {
    return status;
  }
  return expanded;
}

absl::Status CheckFlagArguments(const std::vector<std::string>& arguments,
                                std::set<std::string>* given) {
  for (size_t i = 1; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--") {
      break;
    }
    const absl::string_view name = FlagName(argument);
    if (name.empty()) {
      continue;  // a positional argument
    }
    const bool has_value = argument.find('=') != std::string::npos;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    // "--nofoo" sets the boolean foo to false.
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        if (given != nullptr) {
          given->insert(std::string(name.substr(2)));
        }
        continue;
      }
    }
    if (flag == nullptr) {
      return UnknownFlag(name);
    }
    if (given != nullptr) {
      given->insert(std::string(name));
    }
    if (has_value) {
      absl::Status valid =
          CheckValue(*flag, absl::string_view(argument).substr(argument.find('=') + 1));
      if (!valid.ok()) {
        return valid;
      }
    } else if (flag->IsOfType<bool>()) {
      // "--resume true" would leave "true" behind as an argument.
      if (i + 1 < arguments.size() && (arguments[i + 1] == "true" || arguments[i + 1] == "false")) {
        return absl::InvalidArgumentError(absl::StrCat(DashedFlag(name), " is a switch: write ",
                                                       DashedFlag(name), " or ", DashedFlag(name),
                                                       "=", arguments[i + 1]));
      }
    } else {
      if (i + 1 >= arguments.size() || arguments[i + 1] == "--") {
        return absl::InvalidArgumentError(absl::StrCat(DashedFlag(name), " needs a value"));
      }
      absl::Status valid = CheckValue(*flag, arguments[++i]);
      if (!valid.ok()) {
        return valid;
      }
    }
  }
  return absl::OkStatus();
}

std::string DashedFlag(absl::string_view name) {
  return absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
}

std::string NearestName(absl::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = word.size() / 3 + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace heterodl
