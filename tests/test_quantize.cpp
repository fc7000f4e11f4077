// `dsv4 quantize` (model/requantize.h, model/quant_recipe.h) on part of the golden quant-mini model (rows of 256, so
// every K type applies) and flash-mini (rows of 64/128: K types fall back): each recipe gives each tensor its
// type, protected tensors stay byte for byte, overrides win, values stay within the type's error, threads do
// not change a byte, and bad input leaves no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/quant.h"
#include "model/imatrix.h"
#include "model/requantize.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

const std::string kQuantMini = std::string(DSV4_SHARED_DIR) + "/golden/quant-mini/model.gguf";
const std::string kFlashMini = std::string(DSV4_SHARED_DIR) + "/golden/flash-mini/model.gguf";

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() / ("dsv4_quantize_" + std::to_string(::getpid()));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

std::vector<float> values(const GgufTensor& t) {
    std::vector<float> v((size_t)t.n_elems());
    dequantize_row(t.type, t.data, v.data(), t.n_elems());
    return v;
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double)(a[i] - b[i]) * (a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

// Upper bounds of the normalized squared error of one requantization of near-Gaussian weights, about 3x the
// values these types reach on such data (Q8_0 ~4e-5, Q4_K ~4e-3, Q3_K ~1.5e-2, Q2_K ~6e-2, IQ2_XXS ~1e-1).
double nmse_bound(GgmlType t) {
    switch (t) {
        case GgmlType::Q8_0: return 2e-4;
        case GgmlType::Q6_K: return 2e-3;
        case GgmlType::Q5_K: return 6e-3;
        case GgmlType::Q4_K: return 2e-2;
        case GgmlType::Q3_K: return 5e-2;
        case GgmlType::MXFP4: return 5e-2;
        case GgmlType::Q2_K: return 2e-1;
        case GgmlType::IQ2_XXS: return 3e-1;
        default: return 1e-6;
    }
}

std::unique_ptr<GgufFile> open(const fs::path& p) {
    auto r = GgufFile::open(p.string());
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? std::move(*r) : nullptr;
}

RequantizeOptions recipe_options(const std::string& name) {
    RequantizeOptions o;
    auto r = find_quant_recipe(name);
    EXPECT_TRUE(r.ok()) << r.error();
    o.selection.recipe = *r;
    o.threads = 2;
    return o;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Check every tensor of `out` against `in` under a recipe.
void check_recipe(const GgufFile& in, const GgufFile& out, const QuantRecipe& r) {
    ASSERT_EQ(in.tensors().size(), out.tensors().size());
    for (const GgufTensor& a : in.tensors()) {
        const GgufTensor* b = out.tensor(a.name);
        ASSERT_NE(b, nullptr) << a.name;
        ASSERT_EQ(a.shape_str(), b->shape_str()) << a.name;
        const bool keep = a.n_dims < 2 || a.type == GgmlType::I32 || a.name.find("hc_") != std::string::npos ||
                          ends_with(a.name, "_ape.weight") || ends_with(a.name, "ffn_gate_inp.weight");
        GgmlType want = ends_with(a.name, "ffn_gate_exps.weight") || ends_with(a.name, "ffn_up_exps.weight")
                            ? r.expert_gate_up
                        : ends_with(a.name, "ffn_down_exps.weight") ? r.expert_down
                                                                     : r.dense;
        if (a.ne[0] % ggml_traits(want).block_elems != 0) want = GgmlType::Q8_0;
        if (keep) {
            EXPECT_EQ(b->type, a.type) << a.name;
            ASSERT_EQ(b->n_bytes, a.n_bytes) << a.name;
            EXPECT_EQ(std::memcmp(a.data, b->data, a.n_bytes), 0) << a.name;
            continue;
        }
        EXPECT_EQ(b->type, want) << a.name;
        if (b->type == a.type) continue;
        const double e = nmse(values(*b), values(a));
        EXPECT_LE(e, nmse_bound(b->type)) << a.name << " as " << ggml_type_name(b->type);
    }
}

// quant-mini's global tensors and its layer 2 (every tensor kind, hash routing aside) with its metadata: the
// recipes' choices are per tensor name, and a seventh of the model keeps the test quick.
fs::path quant_mini_subset(const fs::path& dir) {
    auto in = GgufFile::open(kQuantMini);
    EXPECT_TRUE(in.ok()) << in.error();
    GgufWriter w;
    for (const auto& [key, value] : (*in)->metadata()) w.copy_value(key, value);
    for (const GgufTensor& t : (*in)->tensors()) {
        if (t.name.rfind("blk.", 0) == 0 && t.name.rfind("blk.2.", 0) != 0) continue;
        Status st = w.add_tensor_data(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                                      std::vector<uint8_t>(t.data, t.data + t.n_bytes));
        EXPECT_TRUE(st.ok()) << st.error();
    }
    const fs::path out = dir / "subset.gguf";
    EXPECT_TRUE(w.write(out.string()).ok());
    return out;
}

}  // namespace

TEST(Quantize, RecipesOnQuantMini) {
    TempDir tmp;
    const fs::path subset = quant_mini_subset(tmp.path);
    auto in = open(subset);
    ASSERT_TRUE(in);
    for (const char* name : {"iq2_xxs-mix", "q2_k-mix", "q4_k-experts", "mxfp4-moe", "q8_0"}) {
        const fs::path out = tmp.path / (std::string(name) + ".gguf");
        Status st = requantize_gguf(subset.string(), out.string(), recipe_options(name));
        ASSERT_TRUE(st.ok()) << name << ": " << st.error();
        auto q = open(out);
        ASSERT_TRUE(q);
        check_recipe(*in, *q, *find_quant_recipe(name));
        // Metadata carried over.
        EXPECT_EQ(*q->get_u32("deepseek4.block_count"), *in->get_u32("deepseek4.block_count"));
    }
}

TEST(Quantize, FallsBackWhereRowsAreShortAndOverridesWin) {
    TempDir tmp;
    RequantizeOptions o = recipe_options("q2_k-mix");
    auto ov = parse_quant_override("attn_kv\\.weight$=bf16");
    ASSERT_TRUE(ov.ok()) << ov.error();
    o.selection.overrides.push_back(std::move(*ov));
    std::vector<std::string> notes;
    o.note = [&](const std::string& n) { notes.push_back(n); };
    const fs::path out = tmp.path / "q.gguf";
    Status st = requantize_gguf(kFlashMini, out.string(), o);
    ASSERT_TRUE(st.ok()) << st.error();
    auto q = open(out);
    ASSERT_TRUE(q);
    // flash-mini rows are 64/128 values: no whole Q2_K block, so Q8_0 with a note.
    EXPECT_EQ(q->tensor("blk.0.ffn_gate_exps.weight")->type, GgmlType::Q8_0);
    EXPECT_FALSE(notes.empty());
    EXPECT_EQ(q->tensor("blk.0.attn_kv.weight")->type, GgmlType::BF16);
    EXPECT_EQ(q->tensor("blk.0.attn_q_a.weight")->type, GgmlType::Q8_0);
}

TEST(Quantize, ThreadCountDoesNotChangeTheBytes) {
    TempDir tmp;
    const fs::path subset = quant_mini_subset(tmp.path);
    RequantizeOptions o = recipe_options("iq2_xxs-mix");
    o.threads = 1;
    ASSERT_TRUE(requantize_gguf(subset.string(), (tmp.path / "a.gguf").string(), o).ok());
    o.threads = 3;
    ASSERT_TRUE(requantize_gguf(subset.string(), (tmp.path / "b.gguf").string(), o).ok());
    std::ifstream a(tmp.path / "a.gguf", std::ios::binary), b(tmp.path / "b.gguf", std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_EQ(sa.size(), sb.size());
    EXPECT_TRUE(sa == sb);
}

// The CLI end to end: a recipe with an override, then `dsv4 inspect` shows the mix per role.
TEST(Quantize, CliWritesTheMixAndInspectShowsIt) {
    if (!fs::exists(DSV4_BIN)) GTEST_SKIP() << "dsv4 not built at " << DSV4_BIN;
    TempDir tmp;
    const fs::path out = tmp.path / "mix.gguf";
    auto run = [](const std::string& args, int* rc) {
        std::FILE* p = ::popen((std::string(DSV4_BIN) + " " + args + " 2>&1").c_str(), "r");
        std::string text;
        char buf[4096];
        while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
        *rc = ::pclose(p);
        return text;
    };
    int rc = 0;
    // q2_k-mix with the gate stacks as IQ2_XXS: gate/up then holds both types.
    const fs::path subset = quant_mini_subset(tmp.path);
    std::string text = run("quantize -q -t 2 " + subset.string() + " " + out.string() +
                               " --recipe q2_k-mix --tensor-type 'ffn_gate_exps=iq2_xxs'",
                           &rc);
    ASSERT_EQ(rc, 0) << text;
    text = run("inspect --no-tensors " + out.string(), &rc);
    ASSERT_EQ(rc, 0) << text;
    EXPECT_NE(text.find("mix by role"), std::string::npos) << text;
    const size_t gate = text.find("expert gate/up");
    ASSERT_NE(gate, std::string::npos) << text;
    EXPECT_NE(text.find("IQ2_XXS x", gate), std::string::npos) << text;
    EXPECT_NE(text.find("Q2_K x", gate), std::string::npos) << text;
    EXPECT_NE(text.find("Q3_K x", text.find("expert down")), std::string::npos) << text;
    text = run("quantize -q " + subset.string() + " " + (tmp.path / "x.gguf").string() + " --recipe nonsense", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(text.find("unknown recipe"), std::string::npos) << text;
    EXPECT_FALSE(fs::exists(tmp.path / "x.gguf"));
}

// An imatrix in llama.cpp's GGUF layout for one expert stack: columns k % 16 == 0 weigh 100x. With it the
// stack quantized to IQ2_XXS has a smaller error under those weights; tensors it does not cover come out identical; a
// shape that disagrees with the model is an error naming the imatrix and the tensor.
TEST(Quantize, ImatrixWeightsTheIqSearch) {
    TempDir tmp;
    const fs::path subset = quant_mini_subset(tmp.path);
    // quant-mini's gate/up stacks are IQ2_XXS already (kept as they are); its down stack is Q4_K.
    const std::string name = "blk.2.ffn_down_exps.weight";
    auto write_imatrix = [&](const fs::path& path, int64_t n_cols) {
        GgufWriter w;
        w.set_arr_str("imatrix.datasets", {"test"});
        std::vector<float> sums((size_t)(n_cols * 8)), counts(8, 10.0f);
        for (size_t i = 0; i < sums.size(); ++i) sums[i] = (i % 16 == 0 ? 100.0f : 1.0f) * 10.0f;
        std::vector<uint8_t> sb(sums.size() * 4), cb(counts.size() * 4);
        std::memcpy(sb.data(), sums.data(), sb.size());
        std::memcpy(cb.data(), counts.data(), cb.size());
        EXPECT_TRUE(w.add_tensor_data(name + ".in_sum2", GgmlType::F32, {n_cols, 8}, sb).ok());
        EXPECT_TRUE(w.add_tensor_data(name + ".counts", GgmlType::F32, {1, 8}, cb).ok());
        EXPECT_TRUE(w.write(path.string()).ok());
    };
    write_imatrix(tmp.path / "imatrix.gguf", 256);
    auto im = Imatrix::open((tmp.path / "imatrix.gguf").string());
    ASSERT_TRUE(im.ok()) << im.error();
    RequantizeOptions o = recipe_options("iq2_xxs-mix");
    auto ov = parse_quant_override("ffn_down_exps=iq2_xxs");
    ASSERT_TRUE(ov.ok());
    o.selection.overrides.push_back(std::move(*ov));
    ASSERT_TRUE(requantize_gguf(subset.string(), (tmp.path / "plain.gguf").string(), o).ok());
    o.imatrix = im->get();
    Status st = requantize_gguf(subset.string(), (tmp.path / "weighted.gguf").string(), o);
    ASSERT_TRUE(st.ok()) << st.error();
    auto in = open(subset), plain = open(tmp.path / "plain.gguf"), weighted = open(tmp.path / "weighted.gguf");
    ASSERT_TRUE(in && plain && weighted);
    auto weighted_sse = [&](const GgufFile& f) {
        const std::vector<float> a = values(*in->tensor(name)), b = values(*f.tensor(name));
        double e = 0;
        for (size_t i = 0; i < a.size(); ++i) e += (i % 16 == 0 ? 100.0 : 1.0) * (a[i] - b[i]) * (a[i] - b[i]);
        return e;
    };
    EXPECT_LT(weighted_sse(*weighted), 0.8 * weighted_sse(*plain));
    const GgufTensor* up_a = plain->tensor("blk.2.ffn_up_exps.weight");
    const GgufTensor* up_b = weighted->tensor("blk.2.ffn_up_exps.weight");
    ASSERT_EQ(up_a->n_bytes, up_b->n_bytes);
    EXPECT_EQ(std::memcmp(up_a->data, up_b->data, up_a->n_bytes), 0);

    write_imatrix(tmp.path / "bad.gguf", 128);
    auto bad = Imatrix::open((tmp.path / "bad.gguf").string());
    ASSERT_TRUE(bad.ok()) << bad.error();
    o.imatrix = bad->get();
    const fs::path out = tmp.path / "bad_out.gguf";
    st = requantize_gguf(subset.string(), out.string(), o);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("bad.gguf"), std::string::npos) << st.error();
    EXPECT_NE(st.error().find(name), std::string::npos) << st.error();
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(Imatrix::open((tmp.path / "none.gguf").string()).ok());
}

// The K types take the imatrix through the same file path: quant-mini's layer-2 expert stacks (gate
// IQ2_XXS, down Q4_K; rows of 256) requantized to each K type, with and without an imatrix whose columns
// k % 16 == 0 weigh 100x. Every stack whose type changes has a smaller error under those weights.
TEST(Quantize, ImatrixWeightsTheKQuantSearch) {
    TempDir tmp;
    auto full = GgufFile::open(kQuantMini);
    ASSERT_TRUE(full.ok()) << full.error();
    const std::vector<std::string> names = {"blk.2.ffn_gate_exps.weight", "blk.2.ffn_down_exps.weight"};
    // Just the two stacks and the metadata: ten requantizations stay quick.
    GgufWriter stacks, imatrix;
    for (const auto& [key, value] : (*full)->metadata()) stacks.copy_value(key, value);
    imatrix.set_arr_str("imatrix.datasets", {"test"});
    for (const std::string& name : names) {
        const GgufTensor* t = (*full)->tensor(name);
        ASSERT_NE(t, nullptr) << name;
        ASSERT_EQ(t->n_dims, 3) << name;
        const std::vector<int64_t> ne(t->ne, t->ne + 3);
        const std::vector<uint8_t> bytes(t->data, t->data + t->n_bytes);
        ASSERT_TRUE(stacks.add_tensor_data(name, t->type, ne, bytes).ok());
        const int64_t n_cols = t->ne[0], n_mat = t->ne[2];
        std::vector<float> sums((size_t)(n_cols * n_mat)), counts((size_t)n_mat, 10.0f);
        for (size_t i = 0; i < sums.size(); ++i) sums[i] = (i % 16 == 0 ? 100.0f : 1.0f) * 10.0f;
        std::vector<uint8_t> sb(sums.size() * 4), cb(counts.size() * 4);
        std::memcpy(sb.data(), sums.data(), sb.size());
        std::memcpy(cb.data(), counts.data(), cb.size());
        ASSERT_TRUE(imatrix.add_tensor_data(name + ".in_sum2", GgmlType::F32, {n_cols, n_mat}, sb).ok());
        ASSERT_TRUE(imatrix.add_tensor_data(name + ".counts", GgmlType::F32, {1, n_mat}, cb).ok());
    }
    const fs::path in_path = tmp.path / "stacks.gguf", im_path = tmp.path / "imatrix.gguf";
    ASSERT_TRUE(stacks.write(in_path.string()).ok());
    ASSERT_TRUE(imatrix.write(im_path.string()).ok());
    auto im = Imatrix::open(im_path.string());
    ASSERT_TRUE(im.ok()) << im.error();
    auto in = open(in_path);
    ASSERT_TRUE(in);
    int checked = 0;
    for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
        RequantizeOptions o;
        o.selection.base = type;
        o.threads = 2;
        const std::string tn(ggml_type_name(type));
        const fs::path plain_path = tmp.path / (tn + "_plain.gguf"), weighted_path = tmp.path / (tn + "_im.gguf");
        ASSERT_TRUE(requantize_gguf(in_path.string(), plain_path.string(), o).ok()) << tn;
        o.imatrix = im->get();
        Status st = requantize_gguf(in_path.string(), weighted_path.string(), o);
        ASSERT_TRUE(st.ok()) << tn << ": " << st.error();
        auto plain = open(plain_path), weighted = open(weighted_path);
        ASSERT_TRUE(plain && weighted);
        for (const std::string& name : names) {
            if (in->tensor(name)->type == type) continue;  // kept byte for byte
            ASSERT_EQ(weighted->tensor(name)->type, type) << name;
            const std::vector<float> a = values(*in->tensor(name));
            auto weighted_sse = [&](const GgufFile& f) {
                const std::vector<float> b = values(*f.tensor(name));
                double e = 0;
                for (size_t i = 0; i < a.size(); ++i) e += (i % 16 == 0 ? 100.0 : 1.0) * (a[i] - b[i]) * (a[i] - b[i]);
                return e;
            };
            EXPECT_LT(weighted_sse(*weighted), 0.8 * weighted_sse(*plain)) << name << " as " << tn;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 9);  // both stacks for each type, but the down stack as Q4_K, which it is already
}

TEST(Quantize, BadInputLeavesNoOutput) {
    TempDir tmp;
    const fs::path out = tmp.path / "out.gguf";
    Status st = requantize_gguf((tmp.path / "none.gguf").string(), out.string(), recipe_options("q8_0"));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("none.gguf"), std::string::npos) << st.error();
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(find_quant_recipe("q1_nonsense").ok());
    EXPECT_FALSE(parse_quant_override("attn=nonsense").ok());
    EXPECT_FALSE(parse_quant_override("(=q8_0").ok());
    EXPECT_FALSE(parse_quant_override("noequals").ok());
}
