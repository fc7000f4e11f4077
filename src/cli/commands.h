// Entry points of the dsv4 subcommands; each lives in its own cli/cmd_*.cpp and takes the arguments after
// the subcommand name (argv[0] is "dsv4 <name>"). Returns the process exit code.
#pragma once

namespace dsv4::cli {


}  // namespace dsv4::cli
