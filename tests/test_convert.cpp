// `dsv4 convert` (model/hf_convert.h) on the official-layout flash-mini checkpoints: the FP8/FP4 release form
// must give tensors that dequantize bit for bit to fp8/expected.gguf (FP4 experts as MXFP4, FP8 projections as
// BF16), the BF16 form exactly the golden model's values; the options pick the asked types and MTP placement;
// damaged checkpoints (missing shard, wrong dtype or shape, truncated header, unknown config value) give an
// error naming the file and tensor and leave no output behind. The logits of the converted BF16 model are
// checked against the golden reference by tests/cli_convert.cmake.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/quant.h"
#include "model/deepseek4.h"
#include "model/hf_convert.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

const fs::path kCheckpoints = fs::path(DSV4_SHARED_DIR) / "fixtures/checkpoint/flash-mini";

struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& tag) {
        path = fs::temp_directory_path() / ("dsv4_convert_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

std::vector<float> dequant(const GgufTensor& t) {
    std::vector<float> out((size_t)t.n_elems());
    dequantize_row(t.type, t.data, out.data(), t.n_elems());
    return out;
}

// Every tensor of `got` and `want` has the same name, shape and dequantized bits.
void expect_same_values(const GgufFile& got, const GgufFile& want) {
    ASSERT_EQ(got.tensors().size(), want.tensors().size());
    for (const GgufTensor& w : want.tensors()) {
        const GgufTensor* g = got.tensor(w.name);
        ASSERT_NE(g, nullptr) << w.name << " missing";
        ASSERT_EQ(g->shape_str(), w.shape_str()) << w.name;
        const std::vector<float> a = dequant(*g), b = dequant(w);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << w.name << " (" << ggml_type_name(g->type)
                                                                     << " vs " << ggml_type_name(w.type) << ")";
    }
}

std::unique_ptr<GgufFile> open_gguf(const fs::path& p) {
    auto r = GgufFile::open(p.string());
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? std::move(*r) : nullptr;
}

ConvertOptions quiet_options() {
    ConvertOptions o;
    o.threads = 2;
    return o;
}

// A writable copy of a checkpoint folder.
fs::path copy_checkpoint(const std::string& form, const fs::path& dir) {
    const fs::path dst = dir / form;
    fs::create_directories(dst);
    for (const auto& e : fs::directory_iterator(kCheckpoints / form))
        if (e.path().filename() != "expected.gguf") fs::copy_file(e.path(), dst / e.path().filename());
    fs::permissions(dst, fs::perms::owner_all, fs::perm_options::add);
    for (const auto& e : fs::directory_iterator(dst)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
    return dst;
}

// Rewrite a shard's header through `edit`, keeping its data buffer.
void edit_shard_header(const fs::path& shard, const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream in(shard, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    nlohmann::json h = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + (ptrdiff_t)n);
    edit(h);
    const std::string head = h.dump();
    const uint64_t m = head.size();
    std::ofstream out(shard, std::ios::binary | std::ios::trunc);
    out.write((const char*)&m, 8);
    out.write(head.data(), (std::streamsize)head.size());
    out.write(bytes.data() + 8 + n, (std::streamsize)(bytes.size() - 8 - n));
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::ordered_json&)>& edit) {
    std::ifstream in(dir / "config.json");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
    in.close();
    edit(j);
    std::ofstream(dir / "config.json", std::ios::trunc) << j.dump(2);
}

// Convert a damaged checkpoint: the error must contain every needle, and no output may be left.
void expect_convert_error(const fs::path& ck, const fs::path& out, std::vector<std::string> needles) {
    Status st = convert_checkpoint(ck.string(), out.string(), quiet_options());
    ASSERT_FALSE(st.ok()) << "converted a damaged checkpoint";
    for (const std::string& n : needles) EXPECT_NE(st.error().find(n), std::string::npos) << st.error();
    EXPECT_FALSE(fs::exists(out)) << out;
    EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << out;
}

}  // namespace

TEST(Convert, Fp8ReleaseIsBitExact) {
    TempDir tmp("fp8");
    const fs::path out = tmp.path / "fp8.gguf";
    Status st = convert_checkpoint((kCheckpoints / "fp8").string(), out.string(), quiet_options());
    ASSERT_TRUE(st.ok()) << st.error();
    auto got = open_gguf(out);
    auto want = open_gguf(kCheckpoints / "fp8/expected.gguf");
    ASSERT_TRUE(got && want);
    expect_same_values(*got, *want);
    // Lossless types: FP4 experts repacked into MXFP4, FP8 projections into BF16, vectors F32, ids I32.
    EXPECT_EQ(got->tensor("blk.0.ffn_gate_exps.weight")->type, GgmlType::MXFP4);
    EXPECT_EQ(got->tensor("blk.6.ffn_down_exps.weight")->type, GgmlType::MXFP4);
    EXPECT_EQ(got->tensor("blk.0.attn_q_a.weight")->type, GgmlType::BF16);
    EXPECT_EQ(got->tensor("blk.6.nextn.e_proj.weight")->type, GgmlType::BF16);
    EXPECT_EQ(got->tensor("blk.0.attn_norm.weight")->type, GgmlType::F32);
    EXPECT_EQ(got->tensor("blk.0.ffn_gate_tid2eid.weight")->type, GgmlType::I32);
    // The metadata the engine reads is the golden file's.
    for (const auto& [key, value] : want->metadata()) {
        if (key == "general.name" || key == "general.alignment") continue;  // the writer leaves out the default 32
        const GgufValue* v = got->find(key);
        ASSERT_NE(v, nullptr) << key;
        EXPECT_EQ(gguf_value_str(*v, 64), gguf_value_str(value, 64)) << key;
    }
}

TEST(Convert, Bf16GivesTheGoldenValues) {
    TempDir tmp("bf16");
    const fs::path out = tmp.path / "bf16.gguf";
    Status st = convert_checkpoint((kCheckpoints / "bf16").string(), out.string(), quiet_options());
    ASSERT_TRUE(st.ok()) << st.error();
    auto got = open_gguf(out);
    auto want = open_gguf(fs::path(DSV4_SHARED_DIR) / "golden/flash-mini/model.gguf");
    ASSERT_TRUE(got && want);
    expect_same_values(*got, *want);
}

// One model.safetensors and no index (a checkpoint of one shard): the same values.
TEST(Convert, SingleFileCheckpoint) {
    TempDir tmp("single");
    const fs::path ck = tmp.path / "single";
    fs::create_directories(ck);
    fs::copy_file(kCheckpoints / "bf16/config.json", ck / "config.json");
    nlohmann::json header = nlohmann::json::object();
    std::vector<char> data;
    for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
        std::ifstream in(kCheckpoints / "bf16" / shard, std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        const nlohmann::json h = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + (ptrdiff_t)n);
        const uint64_t base = data.size();
        for (auto it = h.begin(); it != h.end(); ++it) {
            if (it.key() == "__metadata__") continue;
            nlohmann::json e = it.value();
            e["data_offsets"] = {e["data_offsets"][0].get<uint64_t>() + base, e["data_offsets"][1].get<uint64_t>() + base};
            header[it.key()] = e;
        }
        data.insert(data.end(), bytes.begin() + 8 + (ptrdiff_t)n, bytes.end());
    }
    const std::string head = header.dump();
    const uint64_t m = head.size();
    {
        std::ofstream out(ck / "model.safetensors", std::ios::binary);
        out.write((const char*)&m, 8);
        out.write(head.data(), (std::streamsize)head.size());
        out.write(data.data(), (std::streamsize)data.size());
    }
    const fs::path out = tmp.path / "single.gguf";
    Status st = convert_checkpoint(ck.string(), out.string(), quiet_options());
    ASSERT_TRUE(st.ok()) << st.error();
    auto got = open_gguf(out);
    auto want = open_gguf(fs::path(DSV4_SHARED_DIR) / "golden/flash-mini/model.gguf");
    ASSERT_TRUE(got && want);
    expect_same_values(*got, *want);
}

TEST(Convert, TypeOptionsAndSeparateMtp) {
    TempDir tmp("opts");
    ConvertOptions o = quiet_options();
    o.dense = GgmlType::Q8_0;
    o.experts = GgmlType::Q8_0;
    o.mtp = MtpPlacement::separate;
    o.mtp_path = (tmp.path / "mtp.gguf").string();
    const fs::path out = tmp.path / "q8.gguf";
    Status st = convert_checkpoint((kCheckpoints / "fp8").string(), out.string(), o);
    ASSERT_TRUE(st.ok()) << st.error();
    auto main = open_gguf(out);
    auto mtp = open_gguf(o.mtp_path);
    auto want = open_gguf(kCheckpoints / "fp8/expected.gguf");
    ASSERT_TRUE(main && mtp && want);
    EXPECT_EQ(*main->get_u32("deepseek4.block_count"), 6u);
    EXPECT_EQ(*main->get_u32("deepseek4.nextn_predict_layers"), 0u);
    EXPECT_EQ(*mtp->get_u32("deepseek4.block_count"), 7u);
    EXPECT_EQ(*mtp->get_u32("deepseek4.nextn_predict_layers"), 1u);
    size_t n_mtp = 0;
    for (const GgufTensor& t : want->tensors()) {
        const bool is_mtp = t.name.rfind("blk.6.", 0) == 0;
        const GgufFile& f = is_mtp ? *mtp : *main;
        n_mtp += is_mtp;
        const GgufTensor* g = f.tensor(t.name);
        ASSERT_NE(g, nullptr) << t.name;
        EXPECT_EQ((is_mtp ? *main : *mtp).tensor(t.name), nullptr) << t.name << " in both files";
        if (t.n_dims >= 2 && t.type != GgmlType::I32 && t.name.find("hc_") == std::string::npos &&
            t.name.find("_ape") == std::string::npos) {
            EXPECT_EQ(g->type, GgmlType::Q8_0) << t.name;
        }
        // Q8_0 keeps every value within half a step of its block's scale d = amax / 127, plus d's own F16
        // rounding (relative 2^-11) times the largest code 127: 0.5 d + 0.062 d.
        const std::vector<float> a = dequant(*g), b = dequant(t);
        for (size_t i = 0; i < a.size(); i += 32) {
            float amax = 0;
            for (size_t j = i; j < std::min(a.size(), i + 32); ++j) amax = std::max(amax, std::fabs(b[j]));
            for (size_t j = i; j < std::min(a.size(), i + 32); ++j)
                ASSERT_LE(std::fabs(a[j] - b[j]), amax / 127.0f * 0.57f) << t.name << " [" << j << "]";
        }
    }
    EXPECT_EQ(main->tensors().size() + mtp->tensors().size(), want->tensors().size());
    EXPECT_GT(n_mtp, 0u);
    // The MTP file is a sidecar the loader attaches: named, or found beside the main file.
    auto cpu = make_cpu_backend(2);
    ModelLoadOptions lo;
    lo.mtp_path = o.mtp_path;
    auto named = Model::load(out.string(), *cpu, lo);
    ASSERT_TRUE(named.ok()) << named.error();
    EXPECT_TRUE((*named)->has_mtp());
    ModelLoadOptions find;
    find.find_mtp = true;
    auto found = Model::load(out.string(), *cpu, find);
    ASSERT_TRUE(found.ok()) << found.error();
    ASSERT_NE((*found)->mtp_file(), nullptr);
    EXPECT_EQ((*found)->mtp_file()->path(), o.mtp_path);
}

TEST(Convert, DamagedCheckpointsFailCleanly) {
    TempDir tmp("bad");
    const fs::path out = tmp.path / "out.gguf";
    {
        const fs::path ck = copy_checkpoint("bf16", tmp.path / "missing");
        fs::remove(ck / "model-00002-of-00002.safetensors");
        expect_convert_error(ck, out, {"model-00002-of-00002.safetensors", "missing"});
    }
    {
        const fs::path ck = copy_checkpoint("bf16", tmp.path / "config");
        edit_config(ck, [](nlohmann::ordered_json& j) { j["scoring_func"] = "softmax"; });
        expect_convert_error(ck, out, {"config.json", "scoring_func", "softmax"});
    }
    {
        const fs::path ck = copy_checkpoint("fp8", tmp.path / "quant");
        edit_config(ck, [](nlohmann::ordered_json& j) { j["quantization_config"]["weight_block_size"] = {64, 64}; });
        expect_convert_error(ck, out, {"config.json", "weight_block_size"});
    }
    {
        const fs::path ck = copy_checkpoint("bf16", tmp.path / "truncated");
        fs::resize_file(ck / "model-00001-of-00002.safetensors", 100);
        expect_convert_error(ck, out, {"model-00001-of-00002.safetensors", "header length"});
    }
    {
        const fs::path ck = copy_checkpoint("bf16", tmp.path / "dtype");
        edit_shard_header(ck / "model-00001-of-00002.safetensors",
                          [](nlohmann::json& h) { h["layers.0.attn.wq_a.weight"]["dtype"] = "I16"; });
        expect_convert_error(ck, out, {"layers.0.attn.wq_a.weight", "model-00001-of-00002.safetensors", "I16"});
    }
    {
        const fs::path ck = copy_checkpoint("bf16", tmp.path / "shape");
        edit_shard_header(ck / "model-00001-of-00002.safetensors",
                          [](nlohmann::json& h) { h["embed.weight"]["shape"] = {512, 256}; });
        expect_convert_error(ck, out, {"embed.weight", "[512, 256]", "[1024, 128]"});
    }
    {
        const fs::path ck = copy_checkpoint("fp8", tmp.path / "scale");
        edit_shard_header(ck / "model-00001-of-00002.safetensors",
                          [](nlohmann::json& h) { h["layers.0.attn.wq_b.scale"]["shape"] = {1, 8}; });
        expect_convert_error(ck, out, {"layers.0.attn.wq_b.scale", "F8_E8M0 [8, 1]"});
    }
    {
        const fs::path ck = copy_checkpoint("bf16", tmp.path / "expert");
        edit_shard_header(ck / "model-00002-of-00002.safetensors", [](nlohmann::json& h) {
            h["layers.2.ffn.experts.16.w1.weight"] = h["layers.2.ffn.experts.3.w1.weight"];
            h.erase("layers.2.ffn.experts.3.w1.weight");
        });
        std::ifstream in(ck / "model.safetensors.index.json");
        nlohmann::ordered_json idx = nlohmann::ordered_json::parse(in);
        in.close();
        idx["weight_map"].erase("layers.2.ffn.experts.3.w1.weight");
        idx["weight_map"]["layers.2.ffn.experts.16.w1.weight"] = "model-00002-of-00002.safetensors";
        std::ofstream(ck / "model.safetensors.index.json", std::ios::trunc) << idx.dump();
        expect_convert_error(ck, out, {"layers.2.ffn.experts.16.w1.weight", "unknown tensor"});
    }
}

TEST(Convert, CliExitsNonZeroAndLeavesNothing) {
    if (!fs::exists(DSV4_BIN)) GTEST_SKIP() << "dsv4 not built at " << DSV4_BIN;
    TempDir tmp("cli");
    const fs::path ck = copy_checkpoint("bf16", tmp.path);
    fs::remove(ck / "model-00001-of-00002.safetensors");
    const fs::path out = tmp.path / "out.gguf";
    const std::string cmd = std::string(DSV4_BIN) + " convert -q " + ck.string() + " -o " + out.string() + " 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string text;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    const int rc = ::pclose(p);
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) != 0) << text;
    EXPECT_NE(text.find("model-00001-of-00002.safetensors"), std::string::npos) << text;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}
