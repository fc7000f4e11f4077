// `dsv4 run`: one prompt in, streamed completion out (chat format by default, --raw for plain completion).
#include <nlohmann/json.hpp>

#include "cli/chat_display.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "runtime/slot_plan.h"
#include "tokenizer/chat_format.h"

namespace dsv4::cli {

int cmd_run(int argc, char** argv) {
    CLI::App app{"Generate a completion for one prompt, streamed to stdout; speeds go to stderr"};
    ModelOptions mo;
    std::string prompt;
    int64_t n_predict = 256, n_ctx = 4096;
    bool raw = false, thinking = false, no_quant_sim = false;
    SamplingOptions so;
    DeviceOptions dev;
    std::string speculative;
    add_model_options(app, mo);
    app.add_option("-p,--prompt", prompt, "the prompt (a user message, or raw text with --raw)")->required();
    app.add_option("-n,--n-predict", n_predict, "tokens to generate at most")->capture_default_str()->check(positive_number());
    app.add_option("-c,--ctx", n_ctx, "context size in tokens")->capture_default_str()->check(positive_number());
    app.add_flag("--raw", raw, "plain completion: no chat template");
    app.add_flag("--thinking", thinking, "thinking mode: the model reasons before answering");
    app.add_flag("--exact", no_quant_sim, "exact mode (no FP8/FP4 rounding simulation)");
    add_sampling_options(app, so);
    add_speculative_option(app, speculative);
    add_device_options(app, dev);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    dev.exact = no_quant_sim;
    auto loaded = load_model_and_tokenizer(mo, dev);
    if (!loaded.ok()) return fail(loaded.error());
    const Tokenizer& tok = *loaded->tokenizer;
    auto drafts = speculative_drafts(speculative, *loaded->model);
    if (!drafts.ok()) return fail(drafts.error());

    const auto mode = thinking ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
    std::vector<int32_t> ids;
    if (raw) {
        if (tok.add_bos()) ids.push_back(tok.bos());
        tok.encode(prompt, true, ids);
    } else {
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        messages.push_back({{"role", "user"}, {"content", prompt}});
        chat::ChatOptions co;
        co.thinking_mode = mode;
        auto text = chat::encode_messages(messages, co);
        if (!text.ok()) return fail(text.error());
        tok.encode(*text, true, ids);
    }
    n_ctx = std::max<int64_t>(n_ctx, (int64_t)ids.size() + n_predict);

    EngineOptions eo;
    eo.n_slots = 1;
    eo.n_ctx = n_ctx;
    eo.quant_sim = !no_quant_sim;
    eo.prefix_cache = false;
    eo.speculative = *drafts;
    if (auto plan = plan_slots(*loaded->model, eo); !plan.ok()) return fail(plan.error());
    Engine engine(*loaded->model, tok, eo);
    GenerationRequest req;
    req.prompt = std::move(ids);
    req.max_tokens = n_predict;
    req.sampling = to_sampling_params(so);

    GenerationResult r;
    if (raw) {
        r = generate_sync(engine, std::move(req), [](std::string_view t) {
            std::fwrite(t.data(), 1, t.size(), stdout);
            std::fflush(stdout);
        });
        std::fputs("\n", stdout);
    } else {
        ChatDisplay display(mode, stdout);
        r = generate_sync(engine, std::move(req), [&](std::string_view t) { display.feed(t); });
        display.finish();
    }
    if (r.reason == GenerationEnd::error) return fail(r.error);
    print_speed(r);
    print_speculation(engine.stats(), *drafts);
    return 0;
}

}  // namespace dsv4::cli
