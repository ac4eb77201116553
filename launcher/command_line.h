// The launcher's command line before Abseil parses it: flag files expanded,
// dashed names accepted, and every flag name and value checked, so a typo is
// a usage error (exit code 2) that names the nearest flag, never Abseil's
// exit 1 or a flag silently ignored.
#ifndef HETERODL_LAUNCHER_COMMAND_LINE_H_
#define HETERODL_LAUNCHER_COMMAND_LINE_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterodl {

// Rewrites "--foo-bar[=v]" to "--foo_bar[=v]" in place, and "--no-foo" to
// Abseil's "--nofoo" for a boolean foo, up to a bare "--" (what follows it
// is not ours to touch). Values are left alone.
void NormalizeFlagNames(std::vector<std::string>& arguments);

// Replaces each "--flagfile=F" (or "--flagfile F") before a bare "--" with
// F's flags, one per line as "--name=value" or "--name value" ('#' starts a
// comment line), dashed names accepted as on the command line, nested flag
// files expanded. INVALID_ARGUMENT naming the
// file when it cannot be read or includes itself.
absl::StatusOr<std::vector<std::string>> ExpandFlagFiles(const std::vector<std::string>& arguments);

// Checks every flag argument of arguments[1..] (normalized names) up to a
// bare "--": the name is a flag of this program (INVALID_ARGUMENT suggests
// the nearest one otherwise) and its value parses as the flag's type (a
// non-boolean flag without one is an error; a boolean one takes its value
// only after '='). Sets nothing. The names given
// (without dashes) go to `given` when it is not null.
absl::Status CheckFlagArguments(const std::vector<std::string>& arguments,
                                std::set<std::string>* given = nullptr);

// "--name" as users write it: "batch_size" -> "--batch-size".
std::string DashedFlag(absl::string_view name);

// The candidate closest to `word` by edit distance, or "" when none is close
// enough to be what was meant (more than a third of its letters differ).
std::string NearestName(absl::string_view word, const std::vector<std::string>& candidates);

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_COMMAND_LINE_H_
