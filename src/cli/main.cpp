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
    {"tokenize", dsv4::cli::cmd_tokenize, "print the token ids of stdin's text as a JSON array"},
    {"detokenize", dsv4::cli::cmd_detokenize, "print the text of a JSON array of token ids on stdin"},
    {"inspect", dsv4::cli::cmd_inspect, "print a GGUF file's metadata, model config and tensors"},
    {"logits", dsv4::cli::cmd_logits, "run token ids through the model and write float32 logits"},
    {"perplexity", dsv4::cli::cmd_perplexity, "perplexity of a text file (or token ids) in sliding windows"},
    {"prompt", dsv4::cli::cmd_prompt, "render a chat message list (JSON) as the DeepSeek-V4 prompt text"},
    {"run", dsv4::cli::cmd_run, "generate a completion for one prompt (streamed)"},
    {"chat", dsv4::cli::cmd_chat, "interactive multi-turn chat"},
    {"bench", dsv4::cli::cmd_bench, "measure prefill/decode tokens/s and weight bandwidth"},
    {"synth", dsv4::cli::cmd_synth, "write a random-weight DeepSeek-V4 GGUF (tiny, flash or pro sizes)"},
    {"convert", dsv4::cli::cmd_convert, "convert an official DeepSeek-V4 checkpoint (safetensors) to a GGUF"},
    {"quantize", dsv4::cli::cmd_quantize, "requantize a GGUF to a type or a named mix"},
    {"serve", dsv4::cli::cmd_serve, "serve the OpenAI-compatible HTTP API"},
};

void usage(std::FILE* out) {
    std::fprintf(out, "dsv4: DeepSeek-V4 inference engine\n\nusage: dsv4 <command> [options]\n\ncommands:\n");
    for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
    std::fprintf(out, "\nRun 'dsv4 <command> --help' for a command's options; 'dsv4 --version' prints the version.\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    std::string name = argv[1];
    if (name == "--version" || name == "-V") return cmd_version(argc - 1, argv + 1);
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
