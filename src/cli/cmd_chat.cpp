// `dsv4 chat`: interactive multi-turn chat. Reasoning is shown apart from the answer; /reset clears the
// conversation, /exit (or Ctrl-D) quits, Ctrl-C stops the current answer but not the program. Earlier turns
// are reused from the prefix cache instead of being recomputed.
#include <nlohmann/json.hpp>

#include <csignal>
#include <iostream>

#include "cli/chat_display.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "runtime/slot_plan.h"
#include "tokenizer/chat_format.h"

namespace dsv4::cli {

namespace {

// Set by the SIGINT handler; the only process-wide state here, as a signal handler needs.
std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

}  // namespace

int cmd_chat(int argc, char** argv) {
    CLI::App app{"Interactive chat with the model (/reset clears the conversation, /exit quits)"};
    ModelOptions mo;
    std::string system_prompt;
    int64_t n_predict = 1024, n_ctx = 8192;
    bool thinking = false, no_quant_sim = false;
    SamplingOptions so;
    DeviceOptions dev;
    std::string speculative;
    add_model_options(app, mo);
    app.add_option("-s,--system", system_prompt, "system prompt");
    app.add_option("-n,--n-predict", n_predict, "tokens per answer at most")->capture_default_str()->check(positive_number());
    app.add_option("-c,--ctx", n_ctx, "context size in tokens")->capture_default_str()->check(positive_number());
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

    EngineOptions eo;
    eo.n_slots = 1;
    eo.n_ctx = n_ctx;
    eo.quant_sim = !no_quant_sim;
    eo.prefix_cache = true;
    eo.speculative = *drafts;
    if (auto plan = plan_slots(*loaded->model, eo); !plan.ok()) return fail(plan.error());
    Engine engine(*loaded->model, tok, eo);
    const auto mode = thinking ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
    chat::ChatOptions co;
    co.thinking_mode = mode;

    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a Ctrl-C at the prompt interrupts the read
    sigaction(SIGINT, &sa, nullptr);

    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    if (!system_prompt.empty()) history.push_back({{"role", "system"}, {"content", system_prompt}});
    const size_t base = history.size();
    std::fprintf(stderr, "dsv4 chat: %s. Type a message; /reset clears, /exit quits, Ctrl-C stops an answer.\n",
                 mo.path.c_str());
    SamplingParams sp = to_sampling_params(so);
    for (;;) {
        std::fputs("\n> ", stdout);
        std::fflush(stdout);
        std::string line;
        g_interrupted.store(false);
        if (!std::getline(std::cin, line)) {
            if (g_interrupted.load() && !std::cin.eof()) {
                std::cin.clear();
                std::fputs("\n(use /exit or Ctrl-D to quit)", stdout);
                continue;
            }
            break;
        }
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            history.erase(history.begin() + base, history.end());
            std::fputs("(conversation cleared)\n", stdout);
            continue;
        }
        if (line.empty()) continue;
        history.push_back({{"role", "user"}, {"content", line}});
        auto text = chat::encode_messages(history, co);
        if (!text.ok()) {
            history.erase(history.end() - 1);
            std::fprintf(stderr, "dsv4: %s\n", text.error().c_str());
            continue;
        }
        GenerationRequest req;
        req.prompt = tok.encode(*text, true);
        req.max_tokens = std::min<int64_t>(n_predict, n_ctx - (int64_t)req.prompt.size());
        if (req.max_tokens < 1) {
            history.erase(history.end() - 1);
            std::fputs("dsv4: the conversation fills the context; /reset to start over\n", stderr);
            continue;
        }
        sp.seed += 1;  // a fresh draw each turn, still reproducible from --seed
        req.sampling = sp;
        ChatDisplay display(mode, stdout);
        GenerationResult r = generate_sync(engine, std::move(req), [&](std::string_view t) { display.feed(t); },
                                           &g_interrupted);
        display.finish();
        if (r.reason == GenerationEnd::error) {
            std::fprintf(stderr, "dsv4: %s\n", r.error.c_str());
            history.erase(history.end() - 1);
            continue;
        }
        if (r.reason == GenerationEnd::cancelled) std::fputs("(stopped)\n", stderr);
        nlohmann::ordered_json msg = {{"role", "assistant"}, {"content", display.content()}};
        if (mode == chat::ThinkingMode::thinking) msg["reasoning_content"] = display.reasoning();
        history.push_back(msg);
        print_speed(r);
        print_speculation(engine.stats(), *drafts);
    }
    return 0;
}

}  // namespace dsv4::cli
