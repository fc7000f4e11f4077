// `dsv4 prompt`: renders a chat message list (the fixtures' / OpenAI's JSON shape) into the exact DeepSeek-V4
// prompt text and writes it to stdout with nothing added, so that scripts can diff it or feed it to
// `dsv4 tokenize`. Needs no model.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "tokenizer/chat_format.h"

namespace dsv4::cli {
namespace {

using ojson = nlohmann::ordered_json;

// Reads a JSON file ("-" = stdin) keeping object key order, which the tool schemas must render in.
Result<ojson> read_json(const std::string& path) {
    std::string text;
    if (path == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
        std::ifstream in(path, std::ios::binary);
        if (!in) return make_error("cannot open '" + path + "'");
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return make_error("'" + path + "' is not valid JSON");
    return j;
}

}  // namespace

int cmd_prompt(int argc, char** argv) {
    CLI::App app{"Render a chat message list as the DeepSeek-V4 prompt text (written to stdout as is)", argv[0]};
    std::string messages_path, tools_path, effort;
    bool thinking = false, keep_thinking = false, no_bos = false;
    app.add_option("--messages", messages_path,
                   "JSON file ('-' = stdin): a message array, or an object with \"messages\" (and optionally "
                   "\"tools\", \"response_format\") like an OpenAI request")
        ->required();
    app.add_flag("--thinking", thinking, "thinking mode: the prompt ends with <think> (default: chat mode)");
    app.add_flag("--keep-thinking", keep_thinking, "keep the reasoning of earlier assistant turns");
    app.add_option("--reasoning-effort", effort, "high (same as none) or max (adds the official preamble)")
        ->check(CLI::IsMember({"high", "max"}));
    app.add_option("--tools", tools_path, "JSON file with an OpenAI tools array, rendered into the system message");
    app.add_flag("--no-bos", no_bos, "leave out the BOS text");
    CLI11_PARSE(app, argc, argv);

    auto doc = read_json(messages_path);
    if (!doc.ok()) return fail(doc.error());
    ojson messages = *doc, tools, response_format;
    if (doc->is_object()) {
        if (!doc->contains("messages")) return fail("'" + messages_path + "' has no \"messages\" array");
        messages = (*doc)["messages"];
        if (doc->contains("tools")) tools = (*doc)["tools"];
        if (doc->contains("response_format")) response_format = (*doc)["response_format"];
    }
    if (!tools_path.empty()) {
        if (!tools.is_null()) return fail("tools given both in '" + messages_path + "' and with --tools");
        auto t = read_json(tools_path);
        if (!t.ok()) return fail(t.error());
        tools = std::move(*t);
    }
    auto with_tools = chat::attach_request_tools(std::move(messages), tools, response_format);
    if (!with_tools.ok()) return fail(with_tools.error());

    chat::ChatOptions options;
    options.thinking_mode = thinking ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
    options.drop_thinking = !keep_thinking;
    options.add_bos = !no_bos;
    if (!effort.empty()) {
        auto e = chat::parse_reasoning_effort(effort);
        if (!e.ok()) return fail(e.error());
        options.reasoning_effort = *e;
    }
    auto prompt = chat::encode_messages(*with_tools, options);
    if (!prompt.ok()) return fail(messages_path + ": " + prompt.error());
    if (std::fwrite(prompt->data(), 1, prompt->size(), stdout) != prompt->size() || std::fflush(stdout) != 0) {
        return fail("cannot write the prompt to stdout");
    }
    return 0;
}

}  // namespace dsv4::cli
