// Entry points of the dsv4 subcommands; each lives in its own cli/cmd_*.cpp and takes the arguments after
// the subcommand name (argv[0] is "dsv4 <name>"). Returns the process exit code.
#pragma once

namespace dsv4::cli {

int cmd_logits(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);  // cmd_perplexity.cpp
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_bench(int argc, char** argv);

int cmd_synth(int argc, char** argv);  // cmd_synth.cpp

int cmd_serve(int argc, char** argv);  // cmd_serve.cpp

int cmd_inspect(int argc, char** argv);  // cmd_inspect.cpp

int cmd_prompt(int argc, char** argv);  // cmd_prompt.cpp

int cmd_tokenize(int argc, char** argv);    // cmd_tokenize.cpp
int cmd_detokenize(int argc, char** argv);  // cmd_tokenize.cpp

int cmd_convert(int argc, char** argv);   // cmd_convert.cpp
int cmd_quantize(int argc, char** argv);  // cmd_quantize.cpp

}  // namespace dsv4::cli
