// MTP sidecars: the golden flash-mini model split into a main file and an MTP sidecar gives the single file's
// main and MTP logits bit for bit through `dsv4 logits` (with --mtp FILE, and with the sidecar found beside
// the main file); a sidecar that does not fit the main model is refused naming the key or tensor; a DSpark
// (`dflash`) file is recognised and refused as such.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/deepseek4.h"
#include "model/mtp_sidecar.h"
#include "util/test_files.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

const std::string kGolden = std::string(DSV4_SHARED_DIR) + "/golden/flash-mini/";

using test::CmdResult;
using test::GgufCopy;

CmdResult run(const std::string& args) { return test::run_dsv4(args); }

std::vector<char> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool is_mtp_tensor(const std::string& name, int mtp_block) {
    return name.rfind("blk." + std::to_string(mtp_block) + ".", 0) == 0;
}

void write_copy(const GgufFile& src, const fs::path& out, const GgufCopy& edit) {
    const Status s = test::write_gguf_copy(src, out, edit);
    ASSERT_TRUE(s.ok()) << s.error();
}

class MtpSidecar : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kGolden + "model.gguf")) GTEST_SKIP() << "no golden flash-mini model";
        dir_ = fs::temp_directory_path() / ("dsv4_mtp_sidecar_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "split");
        auto f = GgufFile::open(kGolden + "model.gguf");
        ASSERT_TRUE(f.ok()) << f.error();
        golden_ = std::move(*f);
        auto cfg = ModelConfig::from_gguf(*golden_);
        ASSERT_TRUE(cfg.ok()) << cfg.error();
        n_layer_ = cfg->n_layer;
        ASSERT_EQ(cfg->n_nextn, 1);
        ASSERT_GE(mtp_block_index(*golden_), 0);
        // The main file: every tensor but the MTP block's, and metadata saying it has none (as a
        // conversion that ships the block separately writes it).
        GgufCopy main_spec;
        main_spec.meta = [&](GgufWriter& w) {
            w.set_u32("deepseek4.block_count", (uint32_t)n_layer_);
            w.set_u32("deepseek4.nextn_predict_layers", 0);
        };
        main_spec.keep = [&](const std::string& n) { return !is_mtp_tensor(n, n_layer_); };
        write_copy(*golden_, main_path(), main_spec);
        // The sidecar: all metadata, only the MTP block.
        write_copy(*golden_, dir_ / "split" / "model-mtp.gguf", sidecar_spec());
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }

    GgufCopy sidecar_spec() const {
        GgufCopy s;
        s.keep = [this](const std::string& n) { return is_mtp_tensor(n, n_layer_); };
        return s;
    }
    fs::path main_path() const { return dir_ / "split" / "model.gguf"; }
    std::string sidecar_path() const { return (dir_ / "split" / "model-mtp.gguf").string(); }

    // `dsv4 logits ARGS` on the first tokens of the golden sequence; returns the logits file's bytes.
    std::vector<char> logits(const std::string& args, std::string* log = nullptr) {
        auto j = nlohmann::json::parse(std::ifstream(kGolden + "manifest.json"));
        std::vector<int> toks(j["tokens"].begin(), j["tokens"].begin() + 41);
        const fs::path tf = dir_ / "tokens.json";
        std::ofstream(tf) << nlohmann::json(toks).dump();
        const fs::path out = dir_ / "out.f32";
        fs::remove(out);
        const CmdResult r =
            run("logits " + args + " --tokens " + tf.string() + " --prefill 24 --device cpu -t 2 -o " + out.string());
        EXPECT_EQ(r.status, 0) << r.out;
        if (log) *log = r.out;
        return read_bytes(out);
    }

    fs::path dir_;
    std::string bad_ff_;
    std::unique_ptr<GgufFile> golden_;
    int n_layer_ = 0;
};

TEST_F(MtpSidecar, SplitFileGivesTheSameLogitsBitForBit) {
    if (!fs::exists(DSV4_BIN)) GTEST_SKIP() << "dsv4 not built at " << DSV4_BIN;
    const std::string single = "-m " + kGolden + "model.gguf";
    const std::string split = "-m " + main_path().string();

    const std::vector<char> main_single = logits(single);
    ASSERT_FALSE(main_single.empty());
    EXPECT_EQ(logits(split), main_single) << "main logits of the split file differ";

    const std::vector<char> mtp_single = logits(single + " --mtp");
    ASSERT_FALSE(mtp_single.empty());
    EXPECT_NE(mtp_single, main_single);
    // --mtp FILE: the MTP logits of the sidecar named.
    EXPECT_EQ(logits(split + " --mtp " + sidecar_path()), mtp_single) << "--mtp FILE";
    // --mtp alone: the sidecar found beside the main file, and the file it took is printed.
    std::string log;
    EXPECT_EQ(logits(split + " --mtp", &log), mtp_single) << "discovered sidecar";
    EXPECT_NE(log.find("MTP block from '" + sidecar_path() + "'"), std::string::npos) << log;
    // inspect says which block the model would use.
    const CmdResult r = run("inspect --no-tensors --check " + main_path().string());
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("MTP block: from '" + sidecar_path() + "'"), std::string::npos) << r.out;
    const CmdResult sc = run("inspect --no-tensors " + sidecar_path());
    EXPECT_NE(sc.out.find("no: an MTP sidecar"), std::string::npos) << sc.out;
}

TEST_F(MtpSidecar, LoadsInProcessAndKeepsTheSidecar) {
    auto backend = make_cpu_backend(2);
    ModelLoadOptions o;
    o.mtp_path = sidecar_path();
    auto m = Model::load(main_path().string(), *backend, o);
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_TRUE((*m)->has_mtp());
    ASSERT_NE((*m)->mtp_file(), nullptr);
    EXPECT_EQ((*m)->mtp_file()->path(), sidecar_path());
    // Without options nothing is looked for.
    auto plain = Model::load(main_path().string(), *backend);
    ASSERT_TRUE(plain.ok()) << plain.error();
    EXPECT_FALSE((*plain)->has_mtp());
    // The single file already has its block: a sidecar on top is refused.
    auto twice = Model::load(kGolden + "model.gguf", *backend, o);
    ASSERT_FALSE(twice.ok());
    EXPECT_NE(twice.error().find("already holds an MTP block"), std::string::npos) << twice.error();
}

// Each way a sidecar can fail to fit: the error names what does not match.
TEST_F(MtpSidecar, MismatchedSidecarIsRefusedNamingTheKeyOrTensor) {
    auto backend = make_cpu_backend(2);
    struct Case {
        const char* what;
        GgufCopy spec;
        std::string want;
    };
    std::vector<Case> cases;
    {
        auto ff = golden_->get_u32("deepseek4.expert_feed_forward_length");
        ASSERT_TRUE(ff.ok()) << ff.error();
        const uint32_t wide = *ff + 32;
        GgufCopy s = sidecar_spec();
        s.meta = [wide](GgufWriter& w) { w.set_u32("deepseek4.expert_feed_forward_length", wide); };
        bad_ff_ = "key 'deepseek4.expert_feed_forward_length' is " + std::to_string(wide);
        cases.push_back({"expert width", s, bad_ff_});
    }
    {
        GgufCopy s = sidecar_spec();
        s.meta = [](GgufWriter& w) { w.set_f32("deepseek4.hyper_connection.epsilon", 1e-3f); };
        cases.push_back({"hc epsilon", s, "key 'deepseek4.hyper_connection.epsilon'"});
    }
    {
        // Another model's sidecar: its block sits after a different layer count.
        GgufCopy s = sidecar_spec();
        const int il = n_layer_;
        s.rename = [il](const std::string& n) {
            return "blk." + std::to_string(il + 1) + n.substr(("blk." + std::to_string(il)).size());
        };
        cases.push_back({"layer count", s, "holds its MTP block as blk." + std::to_string(il + 1)});
    }
    {
        // A tensor missing from the block.
        GgufCopy s = sidecar_spec();
        const std::string gone = "blk." + std::to_string(n_layer_) + ".nextn.hnorm.weight";
        s.keep = [this, gone](const std::string& n) { return is_mtp_tensor(n, n_layer_) && n != gone; };
        cases.push_back({"missing tensor", s, "missing tensor '" + gone + "'"});
    }
    {
        // A tensor of another shape: the sidecar's expert tensors reshaped as if for 2x the experts.
        GgufCopy s = sidecar_spec();
        const std::string gate = "blk." + std::to_string(n_layer_) + ".ffn_gate_inp.weight";
        s.keep = [this, gate](const std::string& n) { return is_mtp_tensor(n, n_layer_) && n != gate; };
        const GgufTensor* t = golden_->tensor(gate);
        ASSERT_NE(t, nullptr);
        const int64_t cols = t->ne[0], rows = t->ne[1];
        const GgmlType type = t->type;
        const size_t half = t->n_bytes / 2;
        std::vector<uint8_t> bytes(t->data, t->data + half);
        s.meta = [=](GgufWriter& w) {
            (void)w.add_tensor_data(gate, type, {cols, rows / 2}, bytes);
        };
        cases.push_back({"shape", s, "tensor '" + gate + "' has shape"});
    }
    {
        GgufCopy s = sidecar_spec();
        s.keep = [](const std::string&) { return false; };
        cases.push_back({"no block", s, "holds no MTP block"});
    }
    {
        GgufCopy s = sidecar_spec();
        s.meta = [](GgufWriter& w) { w.set_str("general.architecture", "llama"); };
        cases.push_back({"architecture", s, "general.architecture is 'llama'"});
    }
    int i = 0;
    for (const Case& c : cases) {
        const fs::path p = dir_ / ("bad" + std::to_string(i++) + ".gguf");
        write_copy(*golden_, p, c.spec);
        ModelLoadOptions o;
        o.mtp_path = p.string();
        auto m = Model::load(main_path().string(), *backend, o);
        ASSERT_FALSE(m.ok()) << c.what;
        EXPECT_NE(m.error().find(c.want), std::string::npos) << c.what << ": " << m.error();
        EXPECT_NE(m.error().find(p.string()), std::string::npos) << c.what << ": names no file: " << m.error();
    }
    // On the command line: a clear error and a failing exit.
    if (!fs::exists(DSV4_BIN)) return;
    const CmdResult r = run("inspect " + main_path().string() + " --no-tensors --check --mtp " + (dir_ / "bad0.gguf").string());
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(bad_ff_), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("runnable:"), std::string::npos) << r.out;
}

TEST_F(MtpSidecar, DflashFileIsRefusedAsADSparkHead) {
    // A DSpark draft head as llama.cpp names it: its own architecture, a few tensors.
    const fs::path df = dir_ / "draft-dflash.gguf";
    {
        GgufWriter w;
        w.set_str("general.architecture", "dflash");
        w.set_u32("dflash.block_count", 1);
        w.set_u32("dflash.embedding_length", 64);
        ASSERT_TRUE(w.add_tensor_data("blk.0.attn_norm.weight", GgmlType::F32, {64},
                                      std::vector<uint8_t>(64 * 4, 0)).ok());
        ASSERT_TRUE(w.write(df.string()).ok());
    }
    auto backend = make_cpu_backend(2);
    ModelLoadOptions o;
    o.mtp_path = df.string();
    auto m = Model::load(main_path().string(), *backend, o);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("DSpark draft head"), std::string::npos) << m.error();
    EXPECT_NE(m.error().find("does not support DSpark drafts yet"), std::string::npos) << m.error();
    // As the main model.
    auto as_main = Model::load(df.string(), *backend);
    ASSERT_FALSE(as_main.ok());
    EXPECT_NE(as_main.error().find("DSpark draft head"), std::string::npos) << as_main.error();

    // Found beside the main file (its name has "mtp"): left out with the reason, the model loads without MTP.
    const fs::path d2 = dir_ / "beside";
    fs::create_directories(d2);
    fs::copy_file(main_path(), d2 / "model.gguf");
    fs::copy_file(df, d2 / "model-mtp-dspark.gguf");
    std::vector<std::string> notes;
    ModelLoadOptions find;
    find.find_mtp = true;
    find.note = [&](const std::string& n) { notes.push_back(n); };
    auto found = Model::load((d2 / "model.gguf").string(), *backend, find);
    ASSERT_TRUE(found.ok()) << found.error();
    EXPECT_FALSE((*found)->has_mtp());
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("DSpark draft head"), std::string::npos) << notes[0];

    if (!fs::exists(DSV4_BIN)) return;
    const fs::path tf = dir_ / "two.json";
    std::ofstream(tf) << "[1, 2]";
    const CmdResult r = run("logits -m " + main_path().string() + " --mtp " + df.string() + " --tokens " + tf.string() +
                      " --device cpu -o " + (dir_ / "y.f32").string());
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("DSpark"), std::string::npos) << r.out;
}

TEST_F(MtpSidecar, DiscoveryPrefersTheMainFilesOwnSidecar) {
    const fs::path d = dir_ / "many";
    fs::create_directories(d);
    for (const char* n : {"a.gguf", "a-mtp.gguf", "b-mtp.gguf", "a-00002-of-00002-mtp.gguf", "notes-mtp.txt"})
        std::ofstream(d / n) << "x";
    std::vector<std::string> c = mtp_sidecar_candidates((d / "a.gguf").string());
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(fs::path(c[0]).filename(), "a-mtp.gguf");
    // A main file whose stem no candidate shares: all of them, so the caller can say which it saw.
    std::ofstream(d / "c.gguf") << "x";
    c = mtp_sidecar_candidates((d / "c.gguf").string());
    EXPECT_EQ(c.size(), 2u);
    // Several candidates: none attached, a note lists them.
    auto backend = make_cpu_backend(2);
    fs::copy_file(main_path(), d / "main.gguf");
    std::vector<std::string> notes;
    ModelLoadOptions o;
    o.find_mtp = true;
    o.note = [&](const std::string& n) { notes.push_back(n); };
    auto m = Model::load((d / "main.gguf").string(), *backend, o);
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_FALSE((*m)->has_mtp());
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("several MTP sidecars"), std::string::npos) << notes[0];
}

}  // namespace
