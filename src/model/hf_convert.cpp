// The conversion plan and its producers. The plan maps every official tensor to one output tensor (a stack
// for routed experts, the weight for a `.scale`), picks the output type, and checks dtypes and shapes before
// anything is written. Each producer then streams its tensor in chunks of rows: raw copies straight from the
// mapped shard, FP4 experts repacked into MXFP4 blocks, everything else decoded to f32 and quantized row by
// row on the thread pool. Memory is bounded by one chunk (kChunkFloats) whatever the checkpoint's size.
#include "model/hf_convert.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "format/fp8.h"
#include "format/gguf_writer.h"
#include "format/quant.h"
#include "model/hf_checkpoint.h"
#include "tokenizer/hf_tokenizer.h"

namespace dsv4 {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kChunkFloats = int64_t(8) << 20;  // 32 MB of f32 per chunk
constexpr int64_t kFp8Tile = 128;
constexpr int64_t kFp4Block = 32;

enum class Source { plain, fp8, fp4, ids };

struct Plan {
    std::string gguf;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> ne;  // GGUF order
    Source source = Source::plain;
    std::vector<HfTensorRef> parts;   // one, or one per routed expert
    std::vector<HfTensorRef> scales;  // per part, for fp8 / fp4
    bool mtp = false;
    bool experts = false;
};

std::string where(const HfTensorRef& r) { return "tensor '" + r.tensor->name + "' in '" + *r.shard + "'"; }

Status write_all(std::FILE* out, const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, out) != n) return make_error(std::string("write failed: ") + std::strerror(errno));
    return {};
}

// One row of a plain tensor as f32.
void plain_row_to_f32(StDtype dt, const uint8_t* src, float* dst, int64_t n) {
    switch (dt) {
        case StDtype::BF16:
            for (int64_t i = 0; i < n; ++i) { uint16_t v; std::memcpy(&v, src + 2 * i, 2); dst[i] = bf16_to_f32(v); }
            return;
        case StDtype::F16:
            for (int64_t i = 0; i < n; ++i) { uint16_t v; std::memcpy(&v, src + 2 * i, 2); dst[i] = f16_to_f32(v); }
            return;
        default: std::memcpy(dst, src, (size_t)n * 4); return;  // F32 (the plan admits nothing else)
    }
}

// Row r of a FP8 matrix [N, K] with its E8M0 tile scales [ceil(N/128), ceil(K/128)].
void fp8_row_to_f32(const StTensor& w, const StTensor& s, int64_t r, float* dst) {
    const int64_t k = w.shape[1];
    const int64_t tiles = s.shape[1];
    const uint8_t* row = w.data + r * k;
    const uint8_t* srow = s.data + (r / kFp8Tile) * tiles;
    for (int64_t i = 0; i < k; ++i) dst[i] = fp8_e4m3_to_f32(row[i]) * e8m0_to_f32(srow[i / kFp8Tile]);
}

// Row r of an FP4 expert matrix [N, K/2] (two E2M1 codes per byte, low nibble first) with scales [N, K/32].
void fp4_row_to_f32(const StTensor& w, const StTensor& s, int64_t r, float* dst) {
    const int64_t k = w.shape[1] * 2;
    const uint8_t* row = w.data + r * (k / 2);
    const uint8_t* srow = s.data + r * (k / kFp4Block);
    for (int64_t i = 0; i < k; ++i) {
        const uint8_t code = (row[i / 2] >> ((i & 1) * 4)) & 0xf;
        dst[i] = fp4_e2m1_to_f32(code) * e8m0_to_f32(srow[i / kFp4Block]);
    }
}

// The same row repacked into MXFP4 blocks: the E8M0 byte as it is, codes regrouped so that the low nibble
// of qs[j] is element j and the high nibble element j + 16 (ggml's layout). Bit for bit, no arithmetic.
void fp4_row_to_mxfp4(const StTensor& w, const StTensor& s, int64_t r, uint8_t* dst) {
    const int64_t k = w.shape[1] * 2;
    const uint8_t* row = w.data + r * (k / 2);
    const uint8_t* srow = s.data + r * (k / kFp4Block);
    for (int64_t b = 0; b < k / kFp4Block; ++b, dst += 17) {
        uint8_t codes[kFp4Block];
        for (int i = 0; i < kFp4Block; ++i) codes[i] = (row[b * 16 + i / 2] >> ((i & 1) * 4)) & 0xf;
        dst[0] = srow[b];
        for (int j = 0; j < 16; ++j) dst[1 + j] = (uint8_t)(codes[j] | (codes[j + 16] << 4));
    }
}

// Stream one part (a matrix of `rows` rows of `ne0` values) into `out` as `type`.
Status produce_part(const Plan& p, size_t part, GgmlType type, std::FILE* out, ThreadPool& pool) {
    const StTensor& w = *p.parts[part].tensor;
    const StTensor* s = p.scales.empty() ? nullptr : p.scales[part].tensor;
    const int64_t ne0 = p.ne[0];
    const int64_t rows = ne0 ? (p.experts ? p.ne[1] : w.n_elems() / ne0) : 0;
    const GgmlTypeTraits& tt = ggml_traits(type);
    const size_t row_bytes = ggml_row_bytes(tt, ne0);

    if (p.source == Source::ids) {  // I64/I32 ids -> I32, checked against the expert count by the plan
        std::vector<int32_t> ids((size_t)w.n_elems());
        for (size_t i = 0; i < ids.size(); ++i) {
            int64_t v = 0;
            if (w.dtype == StDtype::I64) std::memcpy(&v, w.data + 8 * i, 8);
            else { int32_t v32; std::memcpy(&v32, w.data + 4 * i, 4); v = v32; }
            ids[i] = (int32_t)v;
        }
        return write_all(out, ids.data(), ids.size() * 4);
    }
    if (p.source == Source::plain && ((w.dtype == StDtype::BF16 && type == GgmlType::BF16) ||
                                      (w.dtype == StDtype::F16 && type == GgmlType::F16) ||
                                      (w.dtype == StDtype::F32 && type == GgmlType::F32)))
        return write_all(out, w.data, w.n_bytes);

    const int64_t chunk_rows = std::max<int64_t>(1, std::min<int64_t>(rows, kChunkFloats / std::max<int64_t>(ne0, 1)));
    std::vector<float> f32;
    std::vector<uint8_t> bytes((size_t)chunk_rows * row_bytes);
    if (!(p.source == Source::fp4 && type == GgmlType::MXFP4)) f32.resize((size_t)(chunk_rows * ne0));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const int64_t nr = std::min(chunk_rows, rows - r0);
        pool.parallel_for(nr, 1, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) {
                const int64_t r = r0 + i;
                uint8_t* dst = bytes.data() + i * (int64_t)row_bytes;
                if (p.source == Source::fp4 && type == GgmlType::MXFP4) {
                    fp4_row_to_mxfp4(w, *s, r, dst);
                    continue;
                }
                float* row = f32.data() + i * ne0;
                if (p.source == Source::fp8) fp8_row_to_f32(w, *s, r, row);
                else if (p.source == Source::fp4) fp4_row_to_f32(w, *s, r, row);
                else plain_row_to_f32(w.dtype, w.data + r * ne0 * (int64_t)st_dtype_bytes(w.dtype), row, ne0);
                quantize_row(type, row, dst, ne0);
            }
        });
        DSV4_TRY(write_all(out, bytes.data(), (size_t)nr * row_bytes));
    }
    return {};
}

// GGUF ne of a PyTorch shape.
std::vector<int64_t> to_ne(const std::vector<int64_t>& shape) {
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    if (ne.empty()) ne.push_back(1);
    return ne;
}

// The shapes config.json fixes, for the tensors whose shape a wrong checkpoint would most likely break.
std::vector<int64_t> expected_shape(const std::string& gguf, const HfModelDims& d) {
    auto ends = [&](std::string_view suffix) {
        return gguf.size() >= suffix.size() && gguf.compare(gguf.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (gguf == "token_embd.weight" || gguf == "output.weight") return {d.vocab_size, d.n_embd};
    if (gguf == "output_norm.weight" || ends(".attn_norm.weight") || ends(".ffn_norm.weight")) return {d.n_embd};
    if (ends(".attn_q_a.weight")) return {d.q_rank, d.n_embd};
    if (ends(".attn_q_b.weight") && gguf.find("indexer") == std::string::npos) return {d.n_head * d.head_dim, d.q_rank};
    if (ends(".attn_kv.weight")) return {d.head_dim, d.n_embd};
    if (ends(".ffn_gate_inp.weight")) return {d.n_expert, d.n_embd};
    if (ends(".ffn_gate_shexp.weight") || ends(".ffn_up_shexp.weight")) return {d.n_ff, d.n_embd};
    if (ends(".ffn_down_shexp.weight")) return {d.n_embd, d.n_ff};
    if (ends(".ffn_gate_exps.weight") || ends(".ffn_up_exps.weight")) return {d.n_ff, d.n_embd};
    if (ends(".ffn_down_exps.weight")) return {d.n_embd, d.n_ff};
    if (ends(".ffn_gate_tid2eid.weight")) return {d.vocab_size, d.n_used};
    if (ends(".exp_probs_b.bias")) return {d.n_expert};
    return {};
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// The output type of a tensor: lossless unless the options ask for a quantized type.
Result<GgmlType> choose_type(const Plan& p, const StTensor& w, const ConvertOptions& o) {
    const int64_t ne0 = p.ne[0];
    if (p.source == Source::ids) return GgmlType::I32;
    // Lossless default: FP4 experts repack into MXFP4, FP8 decodes into BF16, BF16/F16/F32 stay as they are.
    GgmlType want = p.source == Source::fp4 ? GgmlType::MXFP4
                  : w.dtype == StDtype::F16 ? GgmlType::F16
                  : w.dtype == StDtype::F32 ? GgmlType::F32
                                            : GgmlType::BF16;
    if (p.experts && o.experts) want = *o.experts;
    if (!p.experts && p.ne.size() >= 2 && w.dtype != StDtype::F32 && o.dense) want = *o.dense;
    // Vectors and F32 matrices (HC mixers, compressor positions) stay F32 whatever the options say.
    if (p.ne.size() == 1 || (w.dtype == StDtype::F32 && !p.experts)) want = GgmlType::F32;
    if (!has_quantizer(want)) return make_error(std::string("no quantizer for ") + ggml_type_name(want).data());
    if (ne0 % ggml_traits(want).block_elems != 0)
        return make_error("tensor '" + p.gguf + "' has rows of " + std::to_string(ne0) + " values, not a multiple of " +
                          std::to_string(ggml_traits(want).block_elems) + " as " + ggml_type_name(want).data() +
                          " needs");
    return want;
}

// FP8 values are exact in BF16 when every tile scale keeps E4M3's 4 significant bits inside BF16's normal
// range: 2^(b-127) * [2^-9, 448] within [2^-126, 2^128) <=> b in [10, 245]. Otherwise F32 (always exact).
bool fp8_fits_bf16(const StTensor& scale) {
    for (size_t i = 0; i < scale.n_bytes; ++i)
        if (scale.data[i] < 10 || scale.data[i] > 245) return false;
    return true;
}

Result<std::vector<Plan>> make_plan(const HfCheckpoint& ck, const HfModelDims& dims, const ConvertOptions& o) {
    std::vector<Plan> plans;
    std::map<std::string, size_t> by_name;
    for (const std::string& name : ck.names()) {
        DSV4_ASSIGN_OR_RETURN(MappedName m, map_official_name(name, dims));
        if (m.is_scale) continue;  // read with its weight
        HfTensorRef ref = ck.find(name);
        auto it = by_name.find(m.gguf);
        if (it == by_name.end()) {
            Plan p;
            p.gguf = m.gguf;
            p.mtp = m.mtp;
            p.experts = m.expert >= 0;
            it = by_name.emplace(m.gguf, plans.size()).first;
            if (p.experts) p.parts.resize((size_t)dims.n_expert);
            plans.push_back(std::move(p));
        }
        Plan& p = plans[it->second];
        if (p.experts != (m.expert >= 0)) return make_error(where(ref) + " collides with another tensor's name");
        if (p.experts) {
            if (p.parts[(size_t)m.expert].tensor) return make_error(where(ref) + " appears twice");
            p.parts[(size_t)m.expert] = ref;
        } else {
            if (!p.parts.empty()) return make_error(where(ref) + " collides with another tensor's name");
            p.parts.push_back(ref);
        }
    }
    for (Plan& p : plans) {
        for (size_t e = 0; e < p.parts.size(); ++e)
            if (!p.parts[e].tensor)
                return make_error("routed expert " + std::to_string(e) + " of '" + p.gguf + "' is missing from the checkpoint");
        const StTensor& t0 = *p.parts[0].tensor;
        const bool ids = p.gguf.find("tid2eid") != std::string::npos;
        for (const HfTensorRef& r : p.parts) {
            const StTensor& t = *r.tensor;
            const std::string official = t.name;
            const std::string scale_name = official.substr(0, official.size() - 7) + ".scale";
            const bool has_scale = official.size() > 7 && official.compare(official.size() - 7, 7, ".weight") == 0 &&
                                   ck.find(scale_name).tensor != nullptr;
            if (t.shape != t0.shape)
                return make_error(where(r) + " has shape " + t.shape_str() + ", unlike " + where(p.parts[0]) + "'s " + t0.shape_str());
            if (ids) {
                if (t.dtype != StDtype::I64 && t.dtype != StDtype::I32)
                    return make_error(where(r) + " has dtype " + std::string(st_dtype_name(t.dtype)) + "; expert ids are I64 or I32");
                p.source = Source::ids;
                for (int64_t i = 0; i < t.n_elems(); ++i) {
                    int64_t v = 0;
                    if (t.dtype == StDtype::I64) std::memcpy(&v, t.data + 8 * i, 8);
                    else { int32_t v32; std::memcpy(&v32, t.data + 4 * i, 4); v = v32; }
                    if (v < 0 || v >= dims.n_expert)
                        return make_error(where(r) + " holds expert id " + std::to_string(v) + " outside [0, " +
                                          std::to_string(dims.n_expert) + ")");
                }
            } else if (t.dtype == StDtype::F8_E4M3) {
                if (!has_scale) return make_error(where(r) + " is F8_E4M3 without its '" + scale_name + "' tile scales");
                const HfTensorRef s = ck.find(scale_name);
                const std::vector<int64_t> want = t.shape.size() == 2
                    ? std::vector<int64_t>{(t.shape[0] + kFp8Tile - 1) / kFp8Tile, (t.shape[1] + kFp8Tile - 1) / kFp8Tile}
                    : std::vector<int64_t>{};
                if (t.shape.size() != 2 || s.tensor->dtype != StDtype::F8_E8M0 || s.tensor->shape != want)
                    return make_error(where(s) + " is " + std::string(st_dtype_name(s.tensor->dtype)) + " " +
                                      s.tensor->shape_str() + "; the tile scales of " + t.name + " " + t.shape_str() +
                                      " are F8_E8M0 " + shape_str(want));
                p.source = Source::fp8;
                p.scales.push_back(s);
            } else if (t.dtype == StDtype::I8 && p.experts && has_scale) {
                const HfTensorRef s = ck.find(scale_name);
                const std::vector<int64_t> want =
                    t.shape.size() == 2 ? std::vector<int64_t>{t.shape[0], t.shape[1] * 2 / kFp4Block} : std::vector<int64_t>{};
                if (t.shape.size() != 2 || (t.shape[1] * 2) % kFp4Block != 0 || s.tensor->dtype != StDtype::F8_E8M0 ||
                    s.tensor->shape != want)
                    return make_error(where(s) + " is " + std::string(st_dtype_name(s.tensor->dtype)) + " " +
                                      s.tensor->shape_str() + "; the FP4 scales of " + t.name + " " + t.shape_str() +
                                      " are F8_E8M0 " + shape_str(want));
                p.source = Source::fp4;
                p.scales.push_back(s);
            } else if (t.dtype == StDtype::BF16 || t.dtype == StDtype::F16 || t.dtype == StDtype::F32) {
                if (has_scale) return make_error(where(r) + " is " + std::string(st_dtype_name(t.dtype)) + " but has a scale tensor");
                p.source = Source::plain;
            } else {
                return make_error(where(r) + " has dtype " + std::string(st_dtype_name(t.dtype)) + " " + t.shape_str() +
                                  ", which this converter does not expect there");
            }
        }
        // Logical shape (FP4 stores two values per byte), checked against config.json where it fixes it.
        std::vector<int64_t> shape = t0.shape;
        if (p.source == Source::fp4) shape[1] *= 2;
        const std::vector<int64_t> want = expected_shape(p.gguf, dims);
        if (!want.empty() && shape != want)
            return make_error(where(p.parts[0]) + " has shape " + shape_str(shape) + "; config.json implies " + shape_str(want));
        p.ne = to_ne(shape);
        if (p.experts) p.ne.push_back((int64_t)p.parts.size());
        DSV4_ASSIGN_OR_RETURN(p.type, choose_type(p, t0, o));
        if (p.source == Source::fp8 && p.type == GgmlType::BF16)
            for (const HfTensorRef& s : p.scales)
                if (!fp8_fits_bf16(*s.tensor)) { p.type = GgmlType::F32; break; }
    }
    return plans;
}

Status add_plans(GgufWriter& w, const std::vector<Plan>& plans, bool with_main, bool with_mtp, ThreadPool& pool) {
    for (const Plan& p : plans) {
        if (p.mtp ? !with_mtp : !with_main) continue;
        const Plan* pp = &p;
        DSV4_TRY(w.add_tensor(p.gguf, p.type, p.ne, [pp, &pool](std::FILE* out) -> Status {
            for (size_t part = 0; part < pp->parts.size(); ++part) {
                Status st = produce_part(*pp, part, pp->type, out, pool);
                if (!st.ok()) return make_error(where(pp->parts[part]) + " -> '" + pp->gguf + "': " + st.error());
            }
            return {};
        }));
    }
    return {};
}

Status add_tokenizer(GgufWriter& w, const std::string& dir, const HfModelDims& dims, const ConvertOptions& o) {
    const fs::path tj = fs::path(dir) / "tokenizer.json";
    if (!fs::exists(tj)) {
        if (o.note) o.note("no tokenizer.json in " + in_quotes(dir) + ": the GGUF gets no tokenizer");
        return {};
    }
    const fs::path tc = fs::path(dir) / "tokenizer_config.json";
    return hf_tokenizer_to_gguf(tj.string(), fs::exists(tc) ? tc.string() : std::string(), dims.vocab_size, w);
}

}  // namespace

Status convert_checkpoint(const std::string& hf_dir, const std::string& out_path, const ConvertOptions& o) {
    DSV4_ASSIGN_OR_RETURN(auto ck, HfCheckpoint::open(hf_dir));
    const std::string config_path = (fs::path(hf_dir) / "config.json").string();
    std::string model_name = fs::path(hf_dir).filename().string();
    if (model_name.empty()) model_name = fs::path(hf_dir).parent_path().filename().string();

    GgufWriter main;
    DSV4_ASSIGN_OR_RETURN(HfModelDims dims,
                          hf_config_to_gguf(ck->config(), config_path, model_name, o.mtp == MtpPlacement::main, main));
    DSV4_TRY(add_tokenizer(main, o.tokenizer_dir.empty() ? hf_dir : o.tokenizer_dir, dims, o));
    DSV4_ASSIGN_OR_RETURN(std::vector<Plan> plans, make_plan(*ck, dims, o));
    if (dims.fp8 != std::any_of(plans.begin(), plans.end(), [](const Plan& p) { return p.source == Source::fp8; }))
        return make_error(in_quotes(config_path) + ": quantization_config " +
                          (dims.fp8 ? std::string("says fp8 but no tensor is F8_E4M3")
                                    : std::string("is absent but tensors are F8_E4M3")));
    ThreadPool pool(std::max(1, o.threads));

    if (o.mtp == MtpPlacement::separate && dims.n_mtp > 0) {
        if (o.mtp_path.empty()) return make_error("the MTP file needs a path");
        GgufWriter side;
        DSV4_TRY(hf_config_to_gguf(ck->config(), config_path, model_name + "-mtp", true, side));
        DSV4_TRY(add_plans(side, plans, false, true, pool));
        DSV4_TRY(side.write(o.mtp_path, o.progress));
    }
    DSV4_TRY(add_plans(main, plans, true, o.mtp == MtpPlacement::main, pool));
    Status st = main.write(out_path, o.progress);
    if (!st.ok() && o.mtp == MtpPlacement::separate) std::remove(o.mtp_path.c_str());
    return st;
}

}  // namespace dsv4
