// `dsv4 inspect` on files the engine cannot run: it still prints everything it can read (metadata, the
// tensor table), then the reason in its `runnable:` section; the exit status is 1 only where part of the file
// cannot be read (a tensor of an unknown type id), 0 otherwise, and 2 with --check for a file that does not run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "util/test_files.h"

namespace fs = std::filesystem;
using namespace dsv4;
using test::CmdResult;
using test::GgufCopy;

namespace {

const std::string kGolden = std::string(DSV4_SHARED_DIR) + "/golden/flash-mini/model.gguf";

class InspectVerdict : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kGolden)) GTEST_SKIP() << "no golden flash-mini model";
        if (!fs::exists(DSV4_BIN)) GTEST_SKIP() << "dsv4 not built at " << DSV4_BIN;
        dir_ = fs::temp_directory_path() / ("dsv4_inspect_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        auto f = GgufFile::open(kGolden);
        ASSERT_TRUE(f.ok()) << f.error();
        golden_ = std::move(*f);
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    fs::path copy(const std::string& name, const GgufCopy& edit) {
        const fs::path p = dir_ / name;
        const Status s = test::write_gguf_copy(*golden_, p, edit);
        EXPECT_TRUE(s.ok()) << s.error();
        return p;
    }
    // Everything a readable file shows, whatever the verdict.
    void expect_full_listing(const CmdResult& r, const std::string& what) {
        for (const char* want : {"metadata:", "deepseek4.embedding_length", "tensors:", "token_embd.weight",
                                 "blk.5.ffn_down_exps.weight", "totals by type:", "runnable:"})
            EXPECT_NE(r.out.find(want), std::string::npos) << what << ": lacks '" << want << "':\n" << r.out;
        // The verdict comes after the listing.
        EXPECT_GT(r.out.find("runnable:"), r.out.find("totals by type:")) << what;
    }
    fs::path dir_;
    std::unique_ptr<GgufFile> golden_;
};

TEST_F(InspectVerdict, RunnableFileSaysYes) {
    const CmdResult r = test::run_dsv4("inspect --check " + kGolden);
    EXPECT_EQ(r.status, 0) << r.out;
    expect_full_listing(r, "golden");
    EXPECT_NE(r.out.find("runnable:\n  yes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("MTP block: blk.6.nextn.* in this file"), std::string::npos) << r.out;
}

TEST_F(InspectVerdict, FilesThatCannotRunShowEverythingThenTheReason) {
    struct Case {
        const char* name;
        GgufCopy edit;
        std::string reason;
    };
    std::vector<Case> cases;
    {
        GgufCopy e;
        e.meta = [](GgufWriter& w) { w.set_str("general.architecture", "deepseek41"); };
        cases.push_back({"arch.gguf", e, "no: general.architecture is 'deepseek41', not 'deepseek4'"});
    }
    {
        GgufCopy e;
        e.keep = [](const std::string& n) { return n != "blk.2.attn_kv.weight"; };
        cases.push_back({"missing.gguf", e, "no: missing tensor 'blk.2.attn_kv.weight'"});
    }
    {
        GgufCopy e;
        e.drop_key = "deepseek4.attention.q_lora_rank";
        cases.push_back({"nokey.gguf", e,
                         "no: " + (dir_ / "nokey.gguf").string() +
                             ": metadata key 'deepseek4.attention.q_lora_rank' not found"});
    }
    {
        // blk.1's sinks as if the model had half the heads.
        const GgufTensor* t = golden_->tensor("blk.1.attn_sinks.weight");
        ASSERT_NE(t, nullptr);
        ASSERT_EQ(t->type, GgmlType::F32);
        const int64_t half = t->ne[0] / 2;
        std::vector<uint8_t> bytes(t->data, t->data + half * 4);
        GgufCopy e;
        e.keep = [](const std::string& n) { return n != "blk.1.attn_sinks.weight"; };
        e.meta = [=](GgufWriter& w) { (void)w.add_tensor_data("blk.1.attn_sinks.weight", GgmlType::F32, {half}, bytes); };
        cases.push_back({"shape.gguf", e,
                         "no: tensor 'blk.1.attn_sinks.weight' has shape [" + std::to_string(half) + "], expected [" +
                             std::to_string(t->ne[0]) + "]"});
    }
    {
        // The MTP block alone, as a sidecar ships it.
        GgufCopy e;
        e.keep = [](const std::string& n) { return n.rfind("blk.6.", 0) == 0; };
        cases.push_back({"alone-mtp.gguf", e, "no: an MTP sidecar (its MTP block is blk.6.nextn.*"});
    }
    for (const Case& c : cases) {
        const fs::path p = copy(c.name, c.edit);
        const CmdResult r = test::run_dsv4("inspect " + p.string());
        EXPECT_EQ(r.status, 0) << c.name << ":\n" << r.out;
        if (std::string(c.name) != "alone-mtp.gguf") expect_full_listing(r, c.name);
        EXPECT_NE(r.out.find("runnable:\n  " + c.reason), std::string::npos) << c.name << ": lacks '" << c.reason
                                                                          << "':\n" << r.out;
        const CmdResult checked = test::run_dsv4("inspect --check --no-tensors " + p.string());
        EXPECT_EQ(checked.status, 2) << c.name << ":\n" << checked.out;
    }
}

TEST_F(InspectVerdict, DflashFileIsNamedAsADSparkHead) {
    GgufCopy e;
    e.meta = [](GgufWriter& w) { w.set_str("general.architecture", "dflash"); };
    const fs::path p = copy("draft.gguf", e);
    const CmdResult r = test::run_dsv4("inspect " + p.string());
    EXPECT_EQ(r.status, 0) << r.out;
    expect_full_listing(r, "dflash");
    EXPECT_NE(r.out.find("is a DSpark draft head (general.architecture 'dflash')"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("does not support DSpark drafts yet"), std::string::npos) << r.out;
}

// A tensor of a type id this build does not know: its size is unknown, yet the metadata and every other
// tensor are listed, the unknown one as "type<id>", then the reason; the exit status says the file could not
// be read in full.
TEST_F(InspectVerdict, UnknownTypeIdStillListsTheRest) {
    const fs::path p = copy("type99.gguf", GgufCopy{});
    std::vector<char> bytes;
    {
        std::ifstream in(p, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    // The tensor info: u64 name length, name, u32 n_dims, u64 ne[n_dims], u32 type id.
    const std::string name = "blk.3.ffn_gate_shexp.weight";
    std::string key(8, '\0');
    const uint64_t len = name.size();
    std::memcpy(key.data(), &len, 8);
    key += name;
    const auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
    ASSERT_NE(at, bytes.end());
    size_t pos = (size_t)(at - bytes.begin()) + key.size();
    uint32_t n_dims = 0;
    std::memcpy(&n_dims, &bytes[pos], 4);
    pos += 4 + 8 * (size_t)n_dims;
    const uint32_t id = 99;
    std::memcpy(&bytes[pos], &id, 4);
    std::ofstream(p, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());

    const CmdResult r = test::run_dsv4("inspect " + p.string());
    EXPECT_EQ(r.status, 1) << r.out;
    expect_full_listing(r, "type 99");
    EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("type99"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("runnable:\n  no: tensor '" + name + "' has unknown ggml type 99"), std::string::npos)
        << r.out;
    // Loading it is still refused by the strict reader, naming the tensor.
    auto strict = GgufFile::open(p.string());
    ASSERT_FALSE(strict.ok());
    EXPECT_NE(strict.error().find("tensor '" + name + "' has unknown ggml type 99"), std::string::npos)
        << strict.error();
    // --tensor on it shows its row; --dequant refuses it.
    const CmdResult one = test::run_dsv4("inspect " + p.string() + " --tensor " + name + " --dequant " +
                                         (dir_ / "x.f32").string());
    EXPECT_EQ(one.status, 1) << one.out;
    EXPECT_NE(one.out.find("has type type99, which has no float form here"), std::string::npos) << one.out;
}

}  // namespace
