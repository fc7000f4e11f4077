// `dsv4 tokenize` and `dsv4 detokenize`: the model's tokenizer on stdin/stdout, for scripts and tests.
//   tokenize:   all of stdin, byte for byte, -> one JSON array of ids on one line (special tokens written in
//               the text are parsed; no BOS is added unless asked).
//   detokenize: a JSON array of ids on stdin -> exactly the bytes they stand for, nothing added.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {
namespace {

Result<std::string> read_stdin() {
    // Binary read: nothing is stripped or translated, so the ids cover every byte given.
    std::string data;
    char buf[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) data.append(buf, n);
    if (std::ferror(stdin)) return make_error("cannot read stdin");
    return data;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(path));
    return Tokenizer::from_gguf(*file);
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
    CLI::App app{"Tokenize stdin (UTF-8 text, read whole) and print the ids as one JSON array"};
    std::string model;
    bool no_special = false, add_bos = false;
    app.add_option("-m,--model", model, "GGUF file holding the tokenizer (a model or a vocab-only file)")->required();
    app.add_flag("--no-special", no_special, "treat special-token texts as plain text");
    app.add_flag("--bos", add_bos, "prepend the BOS token");
    CLI11_PARSE(app, argc, argv);

    auto tok = load_tokenizer(model);
    if (!tok.ok()) return fail(tok.error());
    auto text = read_stdin();
    if (!text.ok()) return fail(text.error());
    std::vector<int32_t> ids;
    if (add_bos) {
        if ((*tok)->bos() < 0) return fail(model + ": the tokenizer has no BOS token");
        ids.push_back((*tok)->bos());
    }
    (*tok)->encode(*text, !no_special, ids);

    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) line += ',';
        line += std::to_string(ids[i]);
    }
    line += "]\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : fail("cannot write stdout");
}

int cmd_detokenize(int argc, char** argv) {
    CLI::App app{"Read a JSON array of token ids on stdin and print the text they stand for, exactly"};
    std::string model;
    app.add_option("-m,--model", model, "GGUF file holding the tokenizer (a model or a vocab-only file)")->required();
    CLI11_PARSE(app, argc, argv);

    auto tok = load_tokenizer(model);
    if (!tok.ok()) return fail(tok.error());
    auto input = read_stdin();
    if (!input.ok()) return fail(input.error());
    const nlohmann::json j = nlohmann::json::parse(*input, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("stdin is not valid JSON (expected an array of token ids)");
    if (!j.is_array()) return fail("stdin holds JSON " + std::string(j.type_name()) + ", not an array of token ids");
    std::vector<int32_t> ids;
    ids.reserve(j.size());
    const int64_t n_vocab = (*tok)->n_vocab();
    for (size_t i = 0; i < j.size(); ++i) {
        const auto& v = j[i];
        if (!v.is_number_integer()) {
            return fail("element " + std::to_string(i) + " of the input (" + v.dump() + ") is not an integer token id");
        }
        // Range-check as 64-bit before narrowing, so 2^32 + 5 is not taken for 5.
        const bool neg = v.is_number_unsigned() ? false : v.get<int64_t>() < 0;
        const bool big = v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(n_vocab)
                                                : v.get<int64_t>() >= n_vocab;
        if (neg || big) {
            return fail("token id " + v.dump() + " at index " + std::to_string(i) + " is outside the vocabulary (0.." +
                        std::to_string(n_vocab - 1) + ")");
        }
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    const std::string text = (*tok)->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : fail("cannot write stdout");
}

}  // namespace dsv4::cli
