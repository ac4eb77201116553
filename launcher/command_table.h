// The launcher's commands as users see them: name, arguments, what each does,
// its flags, an example, and the function that runs it. The one place
// `heterodl --help`, `heterodl help COMMAND`, `heterodl COMMAND --help` and
// main()'s dispatch read from.
#ifndef HETERODL_LAUNCHER_COMMAND_TABLE_H_
#define HETERODL_LAUNCHER_COMMAND_TABLE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace heterodl {

struct CommandContext;  // launcher/commands.h

struct CommandInfo {
  const char* name;
  const char* arguments;           // after the name, e.g. "sample DIR"
  const char* summary;             // one line
  std::vector<const char*> flags;  // flag names as Abseil knows them (underscores)
  const char* example;
  // What the command does; returns the process's exit code.
  int (*run)(const CommandContext& context);
};

// Every command, in the order usage lists them.
const std::vector<CommandInfo>& Commands();

// The command named `name`, or null.
const CommandInfo* FindCommand(absl::string_view name);

// " (did you mean 'serve'?)" for a word close to a command's name, else "".
std::string SuggestCommand(absl::string_view word);

// `heterodl --help`: the commands and where to read more.
std::string ProgramUsage();

// `heterodl help COMMAND`: its usage line, summary, each of its flags with
// type, default and help (dashed names), and the example.
std::string CommandHelp(const CommandInfo& command);

// `heterodl --helpfull`: every flag of every command, once each, sorted, as
// CommandHelp lists them.
std::string AllFlagsHelp();

// Whether `flag` (underscored) is one of `command`'s flags.
bool CommandTakesFlag(const CommandInfo& command, absl::string_view flag);

}  // namespace heterodl

#endif  // HETERODL_LAUNCHER_COMMAND_TABLE_H_
