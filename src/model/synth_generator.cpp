// The random-weight generator's rows: PRNG streams per (seed, tensor, row), Gaussian values stored in the
// tensor's type (quantized where a quantizer exists), random valid blocks for the quantizer-less types,
// routing tables of distinct expert ids; plus the progress line.
#include "model/synth_generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "core/fp16.h"
#include "format/quant.h"

namespace dsv4 {

// ---------------------------------------------------------------------------------------------------------
// Random number streams

namespace {

uint64_t splitmix64(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

// xoshiro256**: fast, 256-bit state, good enough statistics for weights.
class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (auto& x : s_) x = splitmix64(seed);
    }
    uint64_t next() {
        const uint64_t r = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return r;
    }
    // ~N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall), centred and scaled to unit variance. One
    // 64-bit draw per value; the tails stop at +-3.46, which weights do not miss.
    float gaussian() {
        const uint64_t x = next();
        const int64_t sum = (int64_t)(x & 0xffff) + (int64_t)((x >> 16) & 0xffff) + (int64_t)((x >> 32) & 0xffff) +
                            (int64_t)(x >> 48);
        return (float)(sum - 131070) * (1.7320508075688772f / 65536.0f);
    }
    uint32_t below(uint32_t n) { return (uint32_t)(((next() >> 32) * (uint64_t)n) >> 32); }
    void fill(uint8_t* dst, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t x = next();
            std::memcpy(dst + i, &x, 8);
        }
        if (i < n) {
            uint64_t x = next();
            std::memcpy(dst + i, &x, n - i);
        }
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

uint64_t row_seed(uint64_t tensor_key, int64_t row) {
    uint64_t s = tensor_key ^ ((uint64_t)row * 0xd1b54a32d192ed03ull);
    return splitmix64(s);
}

// ---------------------------------------------------------------------------------------------------------
// Random valid blocks for the types without a quantizer (IQ*, TQ*), and on request (random_quantized) for
// the legacy formats (Q4_0 .. Q5_1, Q8_0), MXFP4 and the K-quants: every byte pattern decodes to finite values
// in these formats, so the bytes are
// random except the fp16 super-block scale, which is set so the dequantized values have the wanted std, and
// (types with a min) the fp16 min scale, set so the values are zero-mean on average: a value is
// d * sc * q - dmin * m with independent uniform sc, q, m, so dmin = d * E[q] * E[sc] / E[m] = d * E[q] when
// sc and m have the same range. Facts from ggml's block layouts.

struct RandomBlockLayout {
    size_t d_offset;     // byte offset of the f16 scale
    bool iq1m_split;     // IQ1_M: no d field, its 16 bits are the top nibbles of the 4 u16 scale words
    bool tq2_no_three;   // TQ2_0: 2-bit codes 0..2 mean -1..1; the quantizer never writes 3 (= +2)
    int dmin_offset = -1;  // byte offset of the f16 min scale, -1 when none
    float dmin_ratio = 0;  // dmin = d * dmin_ratio (the mean of the quant codes; negative where the min is added)
    bool e8m0 = false;     // MXFP4: the scale is an E8M0 exponent byte, the power of two nearest d
};

std::optional<RandomBlockLayout> random_block_layout(GgmlType t) {
    switch (t) {
        case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS:
        case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
            return RandomBlockLayout{0, false, false};
        case GgmlType::IQ1_M: return RandomBlockLayout{48, true, false};  // qs[32], qh[16], scales[8]
        case GgmlType::TQ1_0: return RandomBlockLayout{52, false, false}; // qs[48], qh[4], d
        case GgmlType::TQ2_0: return RandomBlockLayout{64, false, true};  // qs[64], d
        case GgmlType::Q8_0: return RandomBlockLayout{0, false, false};   // d, int8 qs[32]
        case GgmlType::Q4_0: case GgmlType::Q5_0: return RandomBlockLayout{0, false, false};  // d, (qh), qs
        case GgmlType::Q4_1: return RandomBlockLayout{0, false, false, 2, -7.5f};   // d, m, qs: x = d*q + m
        case GgmlType::Q5_1: return RandomBlockLayout{0, false, false, 2, -15.5f};  // d, m, qh, qs
        case GgmlType::MXFP4: return RandomBlockLayout{0, false, false, -1, 0.0f, true};  // e, qs[16]
        case GgmlType::Q2_K: return RandomBlockLayout{80, false, false, 82, 1.5f};   // scales[16], qs[64], d, dmin
        case GgmlType::Q3_K: return RandomBlockLayout{108, false, false};            // hmask, qs, scales[12], d
        case GgmlType::Q4_K: return RandomBlockLayout{0, false, false, 2, 7.5f};     // d, dmin, scales[12], qs
        case GgmlType::Q5_K: return RandomBlockLayout{0, false, false, 2, 15.5f};    // d, dmin, scales, qh, qs
        case GgmlType::Q6_K: return RandomBlockLayout{208, false, false};            // ql, qh, int8 scales, d
        default: return std::nullopt;
    }
}

// IQ grid searches run ~100x slower than the K quantizers: synth keeps writing random valid IQ blocks.
bool is_iq_grid_type(GgmlType t) {
    return t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ1_S;
}

bool use_random_blocks(GgmlType t, bool random_quantized) {
    return random_block_layout(t).has_value() && (random_quantized || !has_quantizer(t) || is_iq_grid_type(t));
}

void random_blocks(Rng& rng, GgmlType type, uint16_t d_bits, uint8_t* dst, int64_t n_blocks) {
    const RandomBlockLayout L = *random_block_layout(type);
    const size_t bb = ggml_traits(type).block_bytes;
    // The scale fields every block gets: MXFP4's exponent 128 + log2(d) (2^(e - 128) is its halved scale; a zero
    // or subnormal d takes the smallest), the f16 min.
    const float d = f16_to_f32(d_bits);
    const uint8_t e8 = (uint8_t)std::clamp(d > 0.0f ? 128 + (int)std::lround(std::log2(d)) : 1, 1, 254);
    const uint16_t m_bits = f32_to_f16(d * L.dmin_ratio);
    for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* blk = dst + b * bb;
        rng.fill(blk, bb);
        if (L.e8m0) {
            blk[L.d_offset] = e8;
        } else if (L.iq1m_split) {
            for (int i = 0; i < 4; ++i) {
                uint16_t sc;
                std::memcpy(&sc, blk + L.d_offset + 2 * i, 2);
                sc = (uint16_t)((sc & 0x0fff) | (((d_bits >> (4 * i)) & 0xf) << 12));
                std::memcpy(blk + L.d_offset + 2 * i, &sc, 2);
            }
        } else {
            std::memcpy(blk + L.d_offset, &d_bits, 2);
        }
        if (L.dmin_offset >= 0) std::memcpy(blk + L.dmin_offset, &m_bits, 2);
        if (L.tq2_no_three) {
            for (size_t i = 0; i < L.d_offset; ++i) {
                const uint8_t threes = blk[i] & (blk[i] >> 1) & 0x55;  // low bit of each 2-bit code that is 3
                blk[i] = (uint8_t)(blk[i] & ~(threes << 1));          // 3 -> 1 (zero)
            }
        }
    }
}

// RMS of the dequantized values of random blocks with scale 1: the scale for a wanted std is std / rms.
float random_block_unit_rms(GgmlType type) {
    constexpr int64_t kBlocks = 256;
    const auto& tr = ggml_traits(type);
    std::vector<uint8_t> bytes(kBlocks * tr.block_bytes);
    std::vector<float> vals(kBlocks * tr.block_elems);
    Rng rng(0x5eedca1b0000ull + (uint64_t)type);
    random_blocks(rng, type, f32_to_f16(1.0f), bytes.data(), kBlocks);
    dequantize_row(type, bytes.data(), vals.data(), (int64_t)vals.size());
    double ss = 0;
    for (float v : vals) ss += (double)v * v;
    return (float)std::sqrt(ss / (double)vals.size());
}

}  // namespace

bool synth_type_supported(GgmlType t) {
    if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) return true;
    if (!ggml_traits(t).is_float_weight || t == GgmlType::Q8_1 || t == GgmlType::Q8_K) return false;
    return has_quantizer(t) || random_block_layout(t).has_value();
}

Result<GgmlType> synth_type_named(std::string_view name, const std::string& what) {
    const auto t = ggml_type_from_name(name);
    if (!t) return make_error(what + ": unknown ggml type '" + std::string(name) + "'");
    if (!synth_type_supported(*t))
        return make_error(what + ": type " + std::string(ggml_type_name(*t)) + " cannot be generated (no quantizer for it)");
    return *t;
}

// ---------------------------------------------------------------------------------------------------------
// Progress

SynthProgress::SynthProgress(bool enabled, uint64_t total, std::string label)
    : enabled_(enabled), total_(total), label_(std::move(label)), start_(Clock::now()), last_(start_) {}

void SynthProgress::add(uint64_t bytes) {
    done_ += bytes;
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(250)) return;  // finish() prints the last line
    last_ = now;
    print('\r');
}

void SynthProgress::finish() {
    if (enabled_ && !finished_) print('\n');
    finished_ = true;
}

double SynthProgress::seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void SynthProgress::print(char end) {
    const double s = seconds();
    const double gb = (double)done_ / 1e9;
    std::fprintf(stderr, "\r%s: %5.1f%%  %8.2f / %.2f GB  %6.2f GB/s%c", label_.c_str(),
                 total_ ? 100.0 * (double)done_ / (double)total_ : 100.0, gb, (double)total_ / 1e9,
                 s > 0 ? gb / s : 0.0, end);
    std::fflush(stderr);
}

// ---------------------------------------------------------------------------------------------------------
// Row generator

uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan) {
    uint64_t s = 0;
    for (const auto& t : plan) s += t.n_bytes();
    return s;
}

namespace {

void fill_row(const SynthTensor& t, const SynthHparams& hp, uint64_t key, bool random, uint16_t d_bits, int64_t row,
              float* scratch, uint8_t* dst) {
    Rng rng(row_seed(key, row));
    const int64_t n = t.ne[0];
    if (t.fill == SynthFill::expert_ids) {
        // n distinct ids per row (n = n_expert_used is small: rejection is cheap).
        std::vector<int32_t> ids((size_t)n);
        for (int64_t i = 0; i < n; ++i) {
            int32_t id;
            do {
                id = (int32_t)rng.below((uint32_t)hp.n_expert);
            } while (std::find(ids.begin(), ids.begin() + i, id) != ids.begin() + i);
            ids[i] = id;
        }
        std::memcpy(dst, ids.data(), (size_t)n * 4);
        return;
    }
    if (random) {
        random_blocks(rng, t.type, d_bits, dst, n / ggml_traits(t.type).block_elems);
        return;
    }
    for (int64_t i = 0; i < n; ++i) scratch[i] = t.mean + t.std * rng.gaussian();
    // The codec of the format (format/quant.h; for F32, F16 and BF16 the plain conversion).
    const size_t wrote = quantize_row(t.type, scratch, dst, n);
    DSV4_CHECK(wrote == ggml_row_bytes(ggml_traits(t.type), n));
}

}  // namespace

SynthGenerator::SynthGenerator(const std::vector<SynthTensor>& plan, const SynthHparams& hp, uint64_t seed,
                               int n_threads, bool random_quantized)
    : plan_(plan),
      hp_(hp),
      seed_(seed),
      random_quantized_(random_quantized),
      pool_(n_threads > 0 ? n_threads : ThreadPool::default_threads()) {
    int64_t max_ne0 = 1;
    for (const auto& t : plan) max_ne0 = std::max(max_ne0, t.ne[0]);
    scratch_.assign(pool_.n_threads(), std::vector<float>(max_ne0));
    for (const auto& t : plan)
        if (random_rows(t) && !unit_rms_.count(t.type)) unit_rms_[t.type] = random_block_unit_rms(t.type);
}

bool SynthGenerator::random_rows(const SynthTensor& t) const {
    // Random blocks are zero-mean: a quantizable tensor with a mean (none in the plan today) keeps the quantizer.
    return t.fill == SynthFill::gaussian &&
           use_random_blocks(t.type, random_quantized_ && (t.mean == 0.0f || !has_quantizer(t.type)));
}

void SynthGenerator::fill(size_t index, int64_t r0, int64_t n, uint8_t* dst) {
    const SynthTensor& t = plan_[index];
    const size_t row_bytes = ggml_row_bytes(ggml_traits(t.type), t.ne[0]);
    uint64_t key = seed_;
    key = splitmix64(key) ^ fnv1a(t.name);
    const bool random = random_rows(t);
    uint16_t d_bits = 0;
    if (random) {
        DSV4_CHECK(t.fill == SynthFill::gaussian && t.mean == 0.0f);
        d_bits = f32_to_f16(t.std / unit_rms_.at(t.type));
    }
    const int64_t grain = std::max<int64_t>(1, 16384 / t.ne[0]);
    pool_.parallel_for(n, grain, [&](int64_t b, int64_t e, int ti) {
        for (int64_t r = b; r < e; ++r)
            fill_row(t, hp_, key, random, d_bits, r0 + r, scratch_[ti].data(), dst + (size_t)r * row_bytes);
    });
}

}  // namespace dsv4
