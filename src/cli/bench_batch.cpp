#include "cli/bench_batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/bench_counts.h"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"

namespace dsv4::cli {

using Clock = std::chrono::steady_clock;

void fill_cache_randomly(Model& m, KvCache& cache, int64_t depth) {
    const ModelConfig& cfg = m.config();
    Backend& b = m.backend();
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> host;
    auto fill = [&](float* dst, int64_t floats) {
        if (!dst || floats <= 0) return;
        if ((int64_t)host.size() < floats) {
            const size_t old = host.size();
            host.resize((size_t)floats);
            for (size_t i = old; i < host.size(); ++i) host[i] = u(rng);
        }
        b.upload(dst, host.data(), (size_t)floats * sizeof(float));
    };
    // Packed rows (a quant-sim cache): random rows as the quant-sim rounding leaves them, packed once per kind
    // (pack_row rounds a row of dim values and packs it into rf floats).
    auto fill_packed = [&](std::vector<float>& packed, float* dst, int64_t rows, int dim, int64_t rf, auto&& pack_row) {
        if (!dst || rows <= 0) return;
        if ((int64_t)packed.size() < rows * rf) {
            std::vector<float> v((size_t)dim);
            for (int64_t r = (int64_t)packed.size() / rf; r < rows; ++r) {
                packed.resize((size_t)((r + 1) * rf));
                for (auto& x : v) x = u(rng);
                pack_row(v.data(), reinterpret_cast<uint8_t*>(packed.data() + r * rf));
            }
        }
        b.upload(dst, packed.data(), (size_t)(rows * rf) * sizeof(float));
    };
    const int hd = cfg.head_dim, rd = cfg.rope_dim, id = cfg.index_head_dim;
    auto pack_key = [&](float* v, uint8_t* row) {
        for (int j = 0; j < id; j += kFp4Block) fake_quant_block(v + j, kFp4Block, true);
        fp4_pack_row(v, id, row);
    };
    auto pack_entry = [&](float* v, uint8_t* row) {
        for (int j = 0; j < hd - rd; j += kFp8Block) fake_quant_block(v + j, std::min(kFp8Block, hd - rd - j), false);
        kv_pack_row(v, hd, rd, row);
    };
    std::vector<float> keys, entries;
    for (int il = 0; il < cfg.n_layer; ++il) {
        LayerCache& L = cache.layer(il);
        fill(L.window, (int64_t)cfg.window * hd);
        if (L.ratio > 0 && L.comp_packed)
            fill_packed(entries, L.comp, depth / L.ratio, hd, L.comp_row_floats, pack_entry);
        else if (L.ratio > 0)
            fill(L.comp, depth / L.ratio * hd);
        if (L.ratio == 4 && L.index_fp4)
            fill_packed(keys, L.index, depth / 4, id, L.index_row_floats, pack_key);
        else if (L.ratio == 4)
            fill(L.index, depth / 4 * id);
    }
    b.synchronize();
    cache.set_pos(depth);
}

Status reach_depth(Model& m, StepRunner& runner, KvCache& cache, int64_t depth, int64_t chunk, bool skip_fill,
                   const StepOptions& opt, std::mt19937& rng) {
    if (skip_fill) {
        fill_cache_randomly(m, cache, depth);
        return {};
    }
    std::vector<int32_t> fill((size_t)depth);
    for (auto& t : fill) t = (int32_t)(rng() % m.config().n_vocab);
    for (int64_t p = 0; p < depth; p += chunk) {
        const int64_t e = std::min(depth, p + chunk);
        DSV4_TRY(runner.step(cache, std::span<const int32_t>(fill.data() + p, e - p), opt, nullptr));
    }
    return {};
}

double median_of(std::vector<double> runs) {
    std::sort(runs.begin(), runs.end());
    const size_t mid = runs.size() / 2;
    return runs.size() % 2 ? runs[mid] : 0.5 * (runs[mid - 1] + runs[mid]);
}

Result<nlohmann::ordered_json> bench_batches(Model& m, StepRunner& runner, const StepOptions& opt,
                                             const BatchBench& b, std::mt19937& rng) {
    const int64_t V = m.config().n_vocab;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (int64_t depth : b.depths) {
        for (int64_t n : b.sizes) {
            if (n <= 0) return make_error("--batch sizes must be positive");
            std::vector<std::unique_ptr<KvCache>> caches;
            for (int64_t i = 0; i < n; ++i) {
                caches.push_back(
                    m.new_cache(depth + b.n_gen * (b.repeat + (b.profiler ? 1 : 0)) + 1, false, kv_store_for(opt.quant_sim)));
                DSV4_TRY(reach_depth(m, runner, *caches.back(), depth, b.chunk, b.skip_fill, opt, rng));
            }
            std::vector<int32_t> tokens((size_t)n);
            // Each stream's token drawn on the backend (greedy), as the engine draws a batch: only the ids
            // cross to the host, not n rows of logits (33 MB a step at 64 streams and V4's vocabulary).
            const DrawRequest greedy;
            std::vector<SampleOut> drawn((size_t)n);
            std::vector<Model::BatchItem> items((size_t)n);
            for (int64_t i = 0; i < n; ++i)
                items[(size_t)i] = {.cache = caches[(size_t)i].get(),
                                    .tokens = std::span<const int32_t>(&tokens[(size_t)i], 1),
                                    .draw = &greedy,
                                    .drawn = &drawn[(size_t)i]};
            auto run_steps = [&]() -> Status {
                for (int64_t s = 0; s < b.n_gen; ++s) {
                    for (int64_t i = 0; i < n; ++i) tokens[(size_t)i] = (int32_t)(rng() % V);
                    DSV4_TRY(runner.step_batch(items, opt));
                }
                return {};
            };
            std::vector<double> runs;
            for (int64_t rep = 0; rep < b.repeat; ++rep) {
                m.backend().synchronize();
                const auto t0 = Clock::now();
                DSV4_TRY(run_steps());
                m.backend().synchronize();
                runs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            }
            std::string profile;
            if (b.profiler) {
                b.profiler->reset();
                b.profiler->set_enabled(true);
                Status s = run_steps();
                b.profiler->set_enabled(false);
                DSV4_TRY(s);
                profile = b.profiler->report(b.n_gen);
            }
            const double dt = median_of(runs);
            const double bytes = decode_step_weight_bytes(m, n);
            nlohmann::ordered_json r = {{"context", depth},
                                        {"sequences", n},
                                        {"steps", b.n_gen},
                                        {"seconds", dt},
                                        {"tokens_per_s", (double)(n * b.n_gen) / dt},
                                        {"tokens_per_s_per_stream", (double)b.n_gen / dt},
                                        {"weight_bytes_per_step", bytes},
                                        {"weight_gb_per_s", bytes * (double)b.n_gen / dt / 1e9},
                                        {"kv_bytes_per_sequence", caches.front()->bytes()}};
            if (b.repeat > 1) r["repeats"] = b.repeat;
            if (b.skip_fill) r["fill"] = "skipped: random cache entries";
            if (b.peak_gbs > 0) r["fraction_of_peak"] = bytes * (double)b.n_gen / dt / 1e9 / b.peak_gbs;
            if (b.profiler) r["profile"] = profile;
            rows.push_back(r);
        }
    }
    return rows;
}

void print_batches(const nlohmann::ordered_json& rows, double peak_gbs) {
    for (const auto& r : rows) {
        std::printf("batch    ctx %-7lld %3lld streams x %lld steps in %.3f s: %.1f tokens/s (%.2f per stream), "
                    "%.1f MB of weights per step, %.1f GB/s",
                    (long long)r["context"].get<int64_t>(), (long long)r["sequences"].get<int64_t>(),
                    (long long)r["steps"].get<int64_t>(), r["seconds"].get<double>(), r["tokens_per_s"].get<double>(),
                    r["tokens_per_s_per_stream"].get<double>(), r["weight_bytes_per_step"].get<double>() / 1e6,
                    r["weight_gb_per_s"].get<double>());
        if (r.contains("fraction_of_peak"))
            std::printf(" (%.1f%% of %.0f GB/s)", 100 * r["fraction_of_peak"].get<double>(), peak_gbs);
        std::printf("; KV %.1f MB per sequence\n", (double)r["kv_bytes_per_sequence"].get<size_t>() / 1e6);
        if (r.contains("profile"))
            std::printf("profile  %lld streams, per step:\n%s", (long long)r["sequences"].get<int64_t>(),
                        r["profile"].get<std::string>().c_str());
    }
}

}  // namespace dsv4::cli
