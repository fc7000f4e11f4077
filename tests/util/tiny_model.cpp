#include "tiny_model.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "format/gguf.h"
#include "model/synth.h"

namespace dsv4::test {

TinyModel::~TinyModel() {
    tokenizer.reset();
    model.reset();
    backend.reset();
    if (!path.empty()) std::remove(path.c_str());
}

Result<std::unique_ptr<TinyModel>> make_tiny_model(const std::string& name, uint64_t seed) {
    auto t = std::make_unique<TinyModel>();
    DSV4_ASSIGN_OR_RETURN(auto vocab, GgufFile::open(std::string(DSV4_SHARED_DIR) +
                                                     "/fixtures/tokenizer/deepseek_v3/vocab.gguf"));
    DSV4_ASSIGN_OR_RETURN(SynthHparams hp, synth_preset("tiny"));
    DSV4_ASSIGN_OR_RETURN(hp.n_vocab, synth_vocab_size(*vocab));
    SynthWriteOptions wo;
    wo.seed = seed;
    wo.vocab = vocab.get();
    t->path = (std::filesystem::temp_directory_path() / ("dsv4_" + name + "_" + std::to_string(getpid()) + ".gguf"))
                  .string();
    DSV4_TRY(synth_write(hp, SynthTypes{}, wo, t->path));
    t->backend = make_cpu_backend(2);
    DSV4_ASSIGN_OR_RETURN(t->model, Model::load(t->path, *t->backend));
    DSV4_ASSIGN_OR_RETURN(t->tokenizer, Tokenizer::from_gguf(t->model->file()));
    return t;
}

}  // namespace dsv4::test
