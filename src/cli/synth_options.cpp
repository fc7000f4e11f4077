#include "cli/synth_options.h"

#include "format/gguf.h"

namespace dsv4::cli {

void add_synth_options(CLI::App& app, SynthOptions& s, const std::string& what) {
    app.add_option("--synth", s.preset, what + " a random-weight model of this preset (tiny, flash, pro), built in memory");
    app.add_option("--layers", s.layers, "main layers of the --synth model");
    app.add_option("--seed", s.seed, "weight seed of the --synth model");
    app.add_option("--experts-type", s.experts_type,
                   "type of every routed-expert stack of the --synth model (default IQ2_XXS gate/up, Q2_K down)");
    app.add_option("--dense-type", s.dense_type, "type of the dense matrices of the --synth model (default Q8_0)");
    app.add_flag("--synth-quantize", s.quantize,
                 "quantize Gaussian weights with the real quantizers (minutes for a full Q2_K model) instead of "
                 "writing random valid blocks of the same types (same bytes and decode work, seconds)");
    app.add_option("--vocab", s.vocab_path, "the --synth model takes this GGUF's tokenizer (and its vocabulary size)");
}

Result<std::unique_ptr<Model>> make_synth_model(const SynthOptions& s, Backend& backend, int threads, bool progress,
                                                SynthTypes* types_out) {
    DSV4_ASSIGN_OR_RETURN(SynthHparams hp, synth_preset(s.preset, s.layers));
    SynthTypes types;
    if (!s.experts_type.empty()) {
        DSV4_ASSIGN_OR_RETURN(types.expert_down, synth_type_named(s.experts_type, "--experts-type"));
        types.expert_gate_up = types.expert_down;
    }
    if (!s.dense_type.empty()) {
        DSV4_ASSIGN_OR_RETURN(types.dense, synth_type_named(s.dense_type, "--dense-type"));
    }
    std::unique_ptr<GgufFile> vocab;
    SynthWriteOptions so;
    if (!s.vocab_path.empty()) {
        auto f = GgufFile::open(s.vocab_path);
        if (!f.ok()) return make_error("--vocab: " + f.error());
        vocab = std::move(*f);
        DSV4_ASSIGN_OR_RETURN(hp.n_vocab, synth_vocab_size(*vocab));
        so.vocab = vocab.get();
    }
    so.seed = s.seed;
    so.n_threads = threads;
    so.progress = progress;
    so.random_quantized = !s.quantize;
    if (types_out) *types_out = types;
    return synth_model(hp, types, so, backend);
}

}  // namespace dsv4::cli
