// `dsv4 inspect FILE.gguf`: print what a GGUF file holds (header, metadata, the DeepSeek-V4 config derived
// from it, the tensor table and per-type totals), then whether the engine can run it and if not why (the
// load's own error: unknown architecture, missing tensor, wrong shape or type, unknown type id), and the
// MTP block it would use; optionally dump one tensor dequantized to raw f32.
// Vocab-only and loose tensor files inspect fine: a missing model config is reported, not fatal.
// Exit status: 1 when the file cannot be read in full (damaged, or a tensor of an unknown type id whose
// size and data cannot be known); otherwise 0, also for files the engine cannot run (inspect describes
// files; the verdict line says whether it runs), unless --check asks for 2 in that case.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "model/config.h"
#include "model/deepseek4.h"
#include "model/mtp_sidecar.h"
#include "model/quant_recipe.h"

namespace dsv4::cli {
namespace {

// The tensor's type name, or "type<id>" for an id the engine does not know.
std::string type_label(const GgufTensor& t) {
    return t.type_known ? std::string(ggml_type_name(t.type)) : "type" + std::to_string(t.type_id);
}

std::string human_bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

void print_header(const GgufFile& f) {
    std::printf("file:          %s\n", f.path().c_str());
    std::printf("version:       GGUF v%u\n", f.version());
    std::printf("alignment:     %zu\n", f.alignment());
    std::printf("splits:        %u\n", f.n_splits());
    std::printf("data offset:   %llu\n", (unsigned long long)f.data_offset());
}

void print_metadata(const GgufFile& f) {
    std::printf("\nmetadata: %zu keys\n", f.metadata().size());
    for (const auto& [key, value] : f.metadata())
        std::printf("  %-48s %-14s %s\n", key.c_str(), gguf_value_type_str(value).c_str(),
                    gguf_value_str(value, 8, 100).c_str());
}

void print_config(const GgufFile& f) {
    auto cfg = ModelConfig::from_gguf(f);
    if (!cfg.ok()) {
        std::printf("\nno DeepSeek-V4 model config: %s\n", cfg.error().c_str());
        return;
    }
    std::printf("\nmodel config:\n%s", cfg->describe().c_str());
}

void print_tensor_row(const GgufTensor& t, bool show_split) {
    std::printf("  %-48s %-8s %-24s %14s", t.name.c_str(), type_label(t).c_str(), t.shape_str().c_str(),
                t.type_known ? std::to_string(t.n_bytes).c_str() : "?");
    if (show_split) std::printf("  part %u", t.split + 1);
    std::printf("\n");
}

// The quant mix: per tensor role (model/quant_recipe.h), the types it holds with counts and bytes.
void print_mix(const GgufFile& f, uint64_t total_bytes) {
    struct Entry {
        std::map<std::string, std::pair<size_t, uint64_t>> types;
        uint64_t bytes = 0;
    };
    std::map<std::string, Entry> roles;
    for (const GgufTensor& t : f.tensors()) {
        Entry& e = roles[tensor_role(t.name)];
        auto& [count, bytes] = e.types[type_label(t)];
        ++count;
        bytes += t.n_bytes;
        e.bytes += t.n_bytes;
    }
    std::vector<std::pair<std::string, Entry>> rows(roles.begin(), roles.end());
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
    std::printf("\nmix by role:\n");
    for (const auto& [role, e] : rows) {
        std::string types;
        for (const auto& [type, cb] : e.types)
            types += (types.empty() ? "" : ", ") + type + " x" + std::to_string(cb.first);
        std::printf("  %-18s %12s %6.2f%%  %s\n", role.c_str(), human_bytes(e.bytes).c_str(),
                    total_bytes ? 100.0 * (double)e.bytes / (double)total_bytes : 0.0, types.c_str());
    }
}

void print_tensors(const GgufFile& f, bool table) {
    const auto& tensors = f.tensors();
    uint64_t total_bytes = 0;
    int64_t total_elems = 0;
    struct Sum {
        size_t count = 0;
        uint64_t bytes = 0;
    };
    std::map<std::string, Sum> by_type;
    for (const GgufTensor& t : tensors) {
        total_bytes += t.n_bytes;
        total_elems += t.n_elems();
        Sum& s = by_type[type_label(t)];
        ++s.count;
        s.bytes += t.n_bytes;
    }
    std::printf("\ntensors: %zu, %lld elements, %llu bytes (%s)\n", tensors.size(), (long long)total_elems,
                (unsigned long long)total_bytes, human_bytes(total_bytes).c_str());
    if (table && !tensors.empty()) {
        std::printf("  %-48s %-8s %-24s %14s\n", "name", "type", "shape (ne)", "bytes");
        for (const GgufTensor& t : tensors) print_tensor_row(t, f.n_splits() > 1);
    }
    if (tensors.empty()) return;
    // Largest share first: the row that decides the file's size is the one people look for.
    std::vector<std::pair<std::string, Sum>> rows(by_type.begin(), by_type.end());
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
    std::printf("\ntotals by type:\n");
    std::printf("  %-8s %8s %16s %12s %7s\n", "type", "tensors", "bytes", "", "share");
    for (const auto& [name, s] : rows)
        std::printf("  %-8s %8zu %16llu %12s %6.2f%%\n", name.c_str(), s.count, (unsigned long long)s.bytes,
                    human_bytes(s.bytes).c_str(), total_bytes ? 100.0 * (double)s.bytes / (double)total_bytes : 0.0);
    std::printf("  %-8s %8zu %16llu %12s %6.2f%%\n", "all", tensors.size(), (unsigned long long)total_bytes,
                human_bytes(total_bytes).c_str(), 100.0);
    print_mix(f, total_bytes);
}

bool can_dequantize(const GgufTensor& tensor) {
    if (!tensor.type_known || !tensor.data) return false;
    const GgmlType t = tensor.type;
    return ggml_traits(t).is_float_weight || t == GgmlType::I8 || t == GgmlType::I16 || t == GgmlType::I32;
}

// Writes the tensor's values as little-endian f32 in row-major order (GGUF ne reversed): row r of ne[0]
// values is the r-th row of blocks in the file, so dequantizing rows in file order gives that layout.
int dump_tensor(const GgufFile& f, const GgufTensor& t, const std::string& out_path) {
    static_assert(std::endian::native == std::endian::little, "the f32 dump is written in host byte order");
    if (!can_dequantize(t)) {
        std::fprintf(stderr, "dsv4 inspect: tensor '%s' has type %s, which has no float form here\n", t.name.c_str(),
                     type_label(t).c_str());
        return 1;
    }
    std::FILE* out = std::fopen(out_path.c_str(), "wb");
    if (!out) {
        std::fprintf(stderr, "dsv4 inspect: cannot create '%s': %s\n", out_path.c_str(), std::strerror(errno));
        return 1;
    }
    const int64_t n = t.ne[0];
    const int64_t rows = n > 0 ? t.n_elems() / n : 0;
    const size_t row_bytes = t.row_bytes();
    std::vector<float> row((size_t)std::max<int64_t>(n, 1));
    bool ok = true;
    for (int64_t r = 0; r < rows && ok; ++r) {
        dequantize_row(t.type, t.data + (size_t)r * row_bytes, row.data(), n);
        ok = std::fwrite(row.data(), sizeof(float), (size_t)n, out) == (size_t)n;
    }
    ok = std::fclose(out) == 0 && ok;
    if (!ok) {
        std::fprintf(stderr, "dsv4 inspect: cannot write '%s': %s\n", out_path.c_str(), std::strerror(errno));
        std::remove(out_path.c_str());
        return 1;
    }
    std::printf("wrote %lld f32 values (%lld rows of %lld) of '%s' to %s\n", (long long)(rows * n),
                (long long)rows, (long long)n, t.name.c_str(), out_path.c_str());
    return 0;
}

// Whether the engine can run the file: the tensors of unknown type first (the strict reader refuses them),
// then a load onto a one-thread CPU backend, which checks the config, every tensor's presence, shape and
// type and the routing tables' ids without touching the matrices (the CPU computes on the mapped bytes).
// Prints the MTP block it would use. Returns whether it can run.
bool print_verdict(const GgufFile& f, const std::string& path, const ModelOptions& mo) {
    std::printf("\nrunnable:\n");
    size_t n_unknown = 0;
    const GgufTensor* first_unknown = nullptr;
    for (const GgufTensor& t : f.tensors())
        if (!t.type_known && n_unknown++ == 0) first_unknown = &t;
    if (first_unknown) {
        std::printf("  no: tensor '%s' has unknown ggml type %u", first_unknown->name.c_str(), first_unknown->type_id);
        if (n_unknown > 1) std::printf(" (and %zu more tensors of unknown types)", n_unknown - 1);
        std::printf("; this dsv4 cannot read its data\n");
        return false;
    }
    if (f.tensors().empty()) {
        std::printf("  no: the file holds no tensors (a vocabulary or metadata-only file)\n");
        return false;
    }
    if (const int il = mtp_block_index(f); il >= 0 && !f.tensor("token_embd.weight") && dflash_refusal(f).empty()) {
        std::printf("  no: an MTP sidecar (its MTP block is blk.%d.nextn.*, without the main model's tensors); "
                    "give it as -m MAIN.gguf --mtp FILE\n", il);
        return false;
    }
    std::vector<std::string> notes;
    ModelLoadOptions lo = model_load_options(mo);
    lo.note = [&](const std::string& line) { notes.push_back(line); };
    const std::unique_ptr<Backend> cpu = make_cpu_backend(1);  // outlives the model, which frees into it
    auto model = Model::load(path, *cpu, lo);
    if (!model.ok()) {
        std::printf("  no: %s\n", model.error().c_str());
        return false;
    }
    std::printf("  yes: every tensor the config needs is present with its shape\n");
    for (const std::string& n : notes) std::printf("  %s\n", n.c_str());
    const Model& m = **model;
    if (!m.has_mtp())
        std::printf("  MTP block: none\n");
    else if (!m.mtp_file())
        std::printf("  MTP block: blk.%d.nextn.* in this file\n", m.config().n_layer);
    else
        std::printf("  MTP block: from '%s'\n", m.mtp_file()->path().c_str());
    return true;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
    CLI::App app{"Print a GGUF file's header, metadata, DeepSeek-V4 config and tensors", argv[0]};
    std::string path, tensor_name, dequant_path;
    bool no_tensors = false, check = false;
    ModelOptions mo;
    app.add_option("file", path, "GGUF file (for a split model, the *-00001-of-*.gguf part)")->required();
    app.add_option("--mtp", mo.mtp, kMtpHelp)->option_text("FILE");
    app.add_flag("--check", check, "exit with status 2 when the engine cannot run the file");
    auto* tensor_opt = app.add_option("--tensor", tensor_name, "Show only this tensor (with --dequant: dump it)");
    app.add_option("--dequant", dequant_path, "Write the --tensor as little-endian f32, row-major, to this file")
        ->needs(tensor_opt);
    app.add_flag("--no-tensors", no_tensors, "Leave out the per-tensor table (totals are still printed)");
    CLI11_PARSE(app, argc, argv);

    mo.path = path;
    GgufOpenOptions oo;
    oo.keep_unknown_types = true;  // show the rest of such a file; the verdict names the tensor
    auto file = GgufFile::open(path, oo);
    if (!file.ok()) {
        std::fprintf(stderr, "dsv4 inspect: %s\n", file.error().c_str());
        return 1;
    }
    const GgufFile& f = **file;

    if (!tensor_name.empty()) {
        const GgufTensor* t = f.tensor(tensor_name);
        if (!t) {
            std::fprintf(stderr, "dsv4 inspect: '%s' has no tensor named '%s'\n", path.c_str(), tensor_name.c_str());
            return 1;
        }
        print_tensor_row(*t, f.n_splits() > 1);
        return dequant_path.empty() ? 0 : dump_tensor(f, *t, dequant_path);
    }

    print_header(f);
    print_metadata(f);
    print_config(f);
    print_tensors(f, !no_tensors);
    std::fflush(stdout);
    const bool runs = print_verdict(f, path, mo);
    std::fflush(stdout);
    for (const GgufTensor& t : f.tensors())
        if (!t.type_known) {
            std::fprintf(stderr, "dsv4 inspect: tensor '%s' has unknown ggml type %u\n", t.name.c_str(), t.type_id);
            return 1;
        }
    return !runs && check ? 2 : 0;
}

}  // namespace dsv4::cli
