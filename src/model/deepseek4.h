// The DeepSeek-V4 model: load a GGUF onto a backend and run steps. One step processes n consecutive tokens
// of one sequence from the cache's position (prefill chunk, single-token decode or a multi-token verify step
// alike), so there is exactly one forward pass to test.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace dsv4 {

struct StepOptions {
    // The model's inference-time rounding (FP8 E4M3 on non-RoPE KV dims, FP4 E2M1 on indexer q/k). Off is
    // exact mode: the oracle for every faster path.
    bool quant_sim = true;
    // Logits for every token of the step (true) or only the last (false).
    bool all_logits = false;
    // Named trace points for tests: called with backend pointers to intermediates ("block_out": the
    // [n, hc, D] streams after block `layer`; reported once they are written, which is by the next block's
    // first op, its hc_pre with this block's last hc_post fused in).
    std::function<void(const char* name, int layer, const float* data, int64_t count)> trace;
    // Read by whoever runs the steps (exec/step_runner.h; Model itself runs every op as it is called): small
    // steps (the sizes in exec/step_graphs.h) are recorded, and a step that repeats an earlier one's ops (decode,
    // a prompt of a length seen before) replays them as one unit where the backend supports it (CUDA graphs).
    // Off: every op runs as it is called. Steps with a trace always run that way.
    bool graphs = true;
    // Tests: in recorded steps, run each branch's ops (Backend::branch) at its join instead of where they were
    // issued, so a dependency between a branch and the ops beside it that the model does not declare shows up
    // as different results on any backend.
    bool defer_branches = false;
};

// Where the MTP block comes from when the main file has none (model/mtp_sidecar.h).
struct ModelLoadOptions {
    // An MTP sidecar GGUF to attach (error if the main file already holds an MTP block, or the sidecar does
    // not match it).
    std::string mtp_path;
    // Without mtp_path, and when the main file holds no MTP block: attach a sibling `*mtp*.gguf` found
    // beside it. A candidate that cannot be attached (a DSpark head, another model's block) is reported
    // through `note` and left out; the load goes on without MTP.
    bool find_mtp = false;
    // One line per thing worth telling the user (which sidecar was attached, which was left out and why).
    std::function<void(const std::string&)> note;
    // Tensor bytes bound so far of the file's total, after every tensor (model/weights.h).
    LoadProgress progress;
    // This model is one rank of a split over several (expert parallelism, docs/architecture.md): it holds its
    // share of every layer's routed experts and everything else whole; its backend's collective
    // (Backend::set_collective) joins the ranks' steps, which every rank runs with the same tokens.
    ExpertShard shard;
};

// Whether a backend with MoE limits `lim` (Backend::moe_limits) runs a model of config c: an error naming the
// key (expert_count, expert_used_count) and the backend when it does not. Model::load checks it first.
Status check_moe_limits(const ModelConfig& c, const Backend::MoeLimits& lim, const std::string& backend);

class Model {
public:
    static Result<std::unique_ptr<Model>> load(const std::string& path, Backend& backend,
                                               const ModelLoadOptions& options = {});
    // A model described by `file` (metadata and tensor table; a header-only file is fine) whose tensor bytes
    // come from `source` (e.g. a random-weight generator, model/synth.h). The model keeps both: on a host
    // backend the weights are the bytes the source kept.
    static Result<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> file, std::unique_ptr<TensorSource> source,
                                               Backend& backend, const LoadProgress& progress = {},
                                               const ExpertShard& shard = {});
    ~Model();

    const ModelConfig& config() const { return cfg_; }
    const GgufFile& file() const { return *file_; }
    Backend& backend() { return backend_; }
    bool has_mtp() const { return w_.has_mtp; }
    // The MTP sidecar the block was taken from, or null when it is the main file's own (or there is none).
    const GgufFile* mtp_file() const { return mtp_file_.get(); }
    const ModelWeights& weights() const { return w_; }

    // A cache for `capacity` tokens. KvStore::quant_sim (for quant-sim steps only) keeps the indexer's keys
    // packed (model/kv_cache.h).
    std::unique_ptr<KvCache> new_cache(int64_t capacity, bool with_mtp = false, KvStore store = KvStore::exact);

    // Run `tokens` at positions cache.pos() .. cache.pos()+n-1 and advance the cache. Writes logits
    // ([n or 1, n_vocab], host) when `logits` is non-null and the final streams ([n, hc, D], host) when
    // `hidden` is non-null (input of the MTP block).
    Status step(KvCache& cache, std::span<const int32_t> tokens, const StepOptions& opt, std::vector<float>* logits,
                std::vector<float>* hidden = nullptr);

    // One forward over several sequences at once (continuous batching): every token-wise op (projections,
    // MoE, norms, mHC) runs over all rows together; attention runs per sequence on its own cache. Each
    // item's logits follow opt.all_logits / item.all_logits. All caches advance; on error none do.
    struct BatchItem {
        KvCache* cache = nullptr;
        std::span<const int32_t> tokens;
        bool all_logits = false;
        std::vector<float>* logits = nullptr;  // [rows, n_vocab] out, optional
        std::vector<float>* hidden = nullptr;  // [n, hc, D] out, optional
        // The final streams of rows [hidden_from, n) copied into backend memory (the MTP block's input,
        // without a trip through the host), optional.
        float* hidden_device = nullptr;
        int64_t hidden_from = 0;
        // Tokens drawn on the backend (ops/sample_args.h) after each of the last n_draws rows: draw[i] is the
        // request for row n - n_draws + i, drawn[i] its result; only `drawn` crosses to the host. Both set or
        // both null; `logits` may be set as well (it then has at least n_draws rows).
        const DrawRequest* draw = nullptr;
        SampleOut* drawn = nullptr;
        int n_draws = 1;
    };
    Status step_batch(std::span<BatchItem> items, const StepOptions& opt) { return step_batch(items, opt, backend_); }
    // The same forward pass with its ops issued to `ops`: backend() or a backend in front of it (the step
    // recorder of exec/step_graphs.h). The step's scratch is given back to `ops` before this returns.
    Status step_batch(std::span<BatchItem> items, const StepOptions& opt, Backend& ops);

    // The MTP block on the main model's final streams `hidden` ([n, hc, D], host) at positions
    // cache.mtp_pos() .. +n-1, with `next_tokens` the tokens that follow each position. Writes logits for
    // every row and advances cache.mtp_pos().
    Status mtp_step(KvCache& cache, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    const StepOptions& opt, std::vector<float>* logits);
    // The same step with its input in backend memory and its outputs where a speculative decoder wants
    // them: every row's logits on the host, and/or the last row's token drawn on the backend, and/or the
    // block's output streams at the last row (the input of a chained draft step).
    struct MtpItem {
        KvCache* cache = nullptr;
        const float* hidden = nullptr;         // [n, hc, D] backend
        std::span<const int32_t> next_tokens;  // n tokens
        std::vector<float>* logits = nullptr;  // [1 or n, n_vocab] host, optional
        bool all_logits = false;               // logits for every row (else the last)
        const DrawRequest* draw = nullptr;     // with drawn: the token after the last row
        SampleOut* drawn = nullptr;
        float* hidden_out = nullptr;           // [hc, D] backend, optional
    };
    Status mtp_step(const MtpItem& item, const StepOptions& opt) { return mtp_step(item, opt, backend_); }
    // Issued to `ops` (backend() or a recorder in front of it, as step_batch).
    Status mtp_step(const MtpItem& item, const StepOptions& opt, Backend& ops);

    // Largest number of tokens one step may take (bounds scratch memory); callers chunk longer inputs.
    int64_t max_step_tokens() const { return 1 << 16; }

    struct Ctx;  // per-step state (step_context.h)

private:
    Model(Backend& b) : backend_(b) {}
    // Bind the MTP block of a sidecar; the model keeps the file (its weights point into it).
    Status attach_mtp(std::unique_ptr<GgufFile> side);
    struct BlockCarry;
    HcPostArgs block_forward(Ctx& c, int il, const LayerWeights& L, float* H, float* H2, const HcPostArgs* first,
                             const BlockCarry& carry);
    void attention_forward(Ctx& c, int il, const LayerWeights& L, const float* x, float* out);
    // The MoE's output in two parts: the routed experts' sum and the shared expert's output ([n, D] each).
    void ffn_forward(Ctx& c, int il, const LayerWeights& L, const float* x, float* routed, float* shared);
    // Logits of the given rows of H ([n, hc, D]), in backend memory (step scratch).
    const float* output_logits_device(Ctx& c, const float* H, const Weight& hc_fn, const float* hc_base,
                                      const float* hc_scale, const float* norm, const std::vector<int32_t>& rows);
    // The step's backend draws (BatchItem::draw); last_row[i]: item i's last row in `logits` [*, n_vocab].
    void draw_tokens(Ctx& c, const float* logits, std::span<BatchItem> items, const std::vector<int64_t>& last_row);

    Backend& backend_;
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<TensorSource> source_;  // null when the weights are the file's own bytes
    std::unique_ptr<GgufFile> mtp_file_;    // the MTP sidecar, when the block comes from one
    ModelConfig cfg_;
    ModelWeights w_;
    const float* rope_freqs_window_ = nullptr;  // backend memory, rope_dim/2
    const float* rope_freqs_compressed_ = nullptr;
    std::vector<void*> owned_;
};

// RoPE frequencies for a layer: plain base for window-only layers, compress base with YaRN for compressed.
std::vector<float> rope_freqs(const ModelConfig& cfg, bool compressed);

}  // namespace dsv4
