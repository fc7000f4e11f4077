// Random-weight models without a file: the header of the file synth_write would write, read back as a
// header-only GgufFile (so ModelConfig comes from the very same metadata), and a TensorSource that generates
// each tensor when the loader asks for it, with the same row generator as the file path.
#include <algorithm>
#include <map>
#include <new>

#include "format/gguf_writer.h"
#include "model/deepseek4.h"
#include "model/synth.h"
#include "model/synth_generator.h"

namespace dsv4 {

namespace {

// Host buffers for generated tensors, cache-line aligned like the data of a mapped file (GGUF aligns to 32).
constexpr std::align_val_t kBufferAlign{64};
struct AlignedDelete {
    void operator()(uint8_t* p) const { ::operator delete[](p, kBufferAlign); }
};
using HostBuffer = std::unique_ptr<uint8_t[], AlignedDelete>;

Result<HostBuffer> host_buffer(size_t n_bytes, const std::string& what) {
    auto* p = static_cast<uint8_t*>(::operator new[](std::max<size_t>(n_bytes, 1), kBufferAlign, std::nothrow));
    if (!p) return make_error("synth: out of host memory for " + what + " (" + std::to_string(n_bytes) + " bytes)");
    return HostBuffer(p);
}

class SynthTensors final : public TensorSource {
public:
    SynthTensors(std::vector<SynthTensor> plan, const SynthHparams& hp, const SynthWriteOptions& opt)
        : plan_(std::move(plan)), hp_(hp),
          gen_(std::make_unique<SynthGenerator>(plan_, hp_, opt.seed, opt.n_threads, opt.random_quantized)),
          progress_(opt.progress, synth_plan_bytes(plan_), "synth (in memory)") {
        for (size_t i = 0; i < plan_.size(); ++i) index_.emplace(plan_[i].name, i);
    }

    Result<const uint8_t*> bytes(const GgufTensor& t, bool keep) override {
        const auto it = index_.find(t.name);
        if (it == index_.end()) return make_error("synth: tensor '" + t.name + "' is not in the plan");
        if (!gen_) return make_error("synth: tensor '" + t.name + "' asked for after the load finished");
        const size_t i = it->second;
        const size_t n = plan_[i].n_bytes();
        if (n != t.n_bytes)
            return make_error("synth: tensor '" + t.name + "' has " + std::to_string(n) + " planned bytes, the header says " +
                              std::to_string(t.n_bytes));
        uint8_t* dst = nullptr;
        if (keep) {
            DSV4_ASSIGN_OR_RETURN(HostBuffer b, host_buffer(n, "tensor '" + t.name + "'"));
            dst = b.get();
            kept_.push_back(std::move(b));
        } else {
            if (n > staging_bytes_) {
                staging_.reset();  // free the old one first: peak host memory stays one tensor
                DSV4_ASSIGN_OR_RETURN(staging_, host_buffer(n, "the staging buffer"));
                staging_bytes_ = n;
            }
            dst = staging_.get();
        }
        generate(i, dst);
        return static_cast<const uint8_t*>(dst);
    }

    void finish() override {
        gen_.reset();
        staging_.reset();
        staging_bytes_ = 0;
        progress_.finish();
    }

private:
    // Generated in chunks so that the progress line moves within the large expert stacks.
    static constexpr size_t kChunkBytes = 32u << 20;

    void generate(size_t index, uint8_t* dst) {
        const SynthTensor& t = plan_[index];
        const size_t row_bytes = ggml_row_bytes(ggml_traits(t.type), t.ne[0]);
        const int64_t n_rows = t.n_rows();
        const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t)(kChunkBytes / row_bytes));
        for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
            const int64_t n = std::min(rows_per_chunk, n_rows - r0);
            gen_->fill(index, r0, n, dst + (size_t)r0 * row_bytes);
            progress_.add((uint64_t)n * row_bytes);
        }
    }

    const std::vector<SynthTensor> plan_;
    const SynthHparams hp_;
    std::map<std::string, size_t, std::less<>> index_;
    std::unique_ptr<SynthGenerator> gen_;  // references plan_ and hp_; dropped by finish()
    SynthProgress progress_;
    std::vector<HostBuffer> kept_;         // the weights themselves on a host backend
    HostBuffer staging_;
    size_t staging_bytes_ = 0;
};

}  // namespace

Result<SynthSource> synth_source(const SynthHparams& hp, const SynthTypes& types, const SynthWriteOptions& opt) {
    GgufWriter w;
    auto no_file = [](size_t, std::FILE*) -> Status { return make_error("synth: an in-memory model has no file"); };
    DSV4_ASSIGN_OR_RETURN(std::vector<SynthTensor> plan, synth_describe(w, hp, types, opt, no_file));
    DSV4_ASSIGN_OR_RETURN(std::vector<uint8_t> header, w.header());
    SynthSource s;
    DSV4_ASSIGN_OR_RETURN(s.file, GgufFile::parse_header(std::move(header), hp.name + " (in memory)"));
    s.tensors = std::make_unique<SynthTensors>(std::move(plan), hp, opt);
    return s;
}

Result<std::unique_ptr<Model>> synth_model(const SynthHparams& hp, const SynthTypes& types,
                                           const SynthWriteOptions& opt, Backend& backend) {
    DSV4_ASSIGN_OR_RETURN(SynthSource s, synth_source(hp, types, opt));
    return Model::load(std::move(s.file), std::move(s.tensors), backend);
}

}  // namespace dsv4
