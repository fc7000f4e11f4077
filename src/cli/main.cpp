// dsv4 command-line entry: dispatches to one subcommand per file in cli/.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

struct Command {
    const char* name;
    int (*run)(int, char**);
    const char* help;
};

int cmd_version(int, char**) {
    std::printf("dsv4 0.1.0\n");
    return 0;
}

// One line per subcommand; each is implemented in its own cli/cmd_*.cpp.
const Command kCommands[] = {
    {"version", cmd_version, "print the version"},
};

void usage(std::FILE* out) {
    std::fprintf(out, "dsv4: DeepSeek-V4 inference engine\n\nusage: dsv4 <command> [options]\n\ncommands:\n");
    for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
    std::fprintf(out, "\nRun 'dsv4 <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    std::string name = argv[1];
    if (name == "-h" || name == "--help" || name == "help") {
        usage(stdout);
        return 0;
    }
    for (const auto& c : kCommands) {
        if (name == c.name) {
            std::string prog = std::string("dsv4 ") + c.name;
            argv[1] = prog.data();
            return c.run(argc - 1, argv + 1);
        }
    }
    std::fprintf(stderr, "dsv4: unknown command '%s'\n\n", name.c_str());
    usage(stderr);
    return 2;
}
