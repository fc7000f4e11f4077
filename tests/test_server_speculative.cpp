// `dsv4 serve --speculative`: requests through the completions handler (no socket) on an engine that drafts
// with the MTP block, its own thread stepping it, on a random-weight tiny model with the real DeepSeek
// vocabulary. Greedy answers equal a plain engine's, alone and with several requests decoding together (their
// verify steps batched), and /metrics reports the speculative counters.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "util/served_engine.h"
#include "util/tiny_model.h"

namespace dsv4::server {
namespace {

using ojson = nlohmann::ordered_json;

// An engine (speculative or not) served through the routes, and its greedy completions.
class Served {
public:
    Served(Model& m, const Tokenizer& tok, int speculative) : served_(m, tok, options(speculative)) {}
    ojson complete(const std::string& prompt, int max_tokens) {
        httplib::Request req;
        req.body = ojson{{"model", "synth-tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}}.dump();
        httplib::Response res;
        served_.routes().completions(req, res);
        EXPECT_EQ(res.status, 200) << res.body;
        return ojson::parse(res.body, nullptr, false);
    }
    std::string metrics() const { return served_.metrics(); }
    EngineStats stats() { return served_.engine().stats(); }

private:
    static EngineOptions options(int speculative) {
        EngineOptions eo;
        eo.n_slots = 3;
        eo.n_ctx = 256;
        eo.prefill_chunk = 32;
        eo.speculative = speculative;
        return eo;
    }
    test::ServedEngine served_;
};

TEST(ServerSpeculative, GreedyAnswersEqualPlainAndMetricsCountDrafts) {
    auto t = test::make_tiny_model("server_speculative", 5);
    ASSERT_TRUE(t.ok()) << t.error();
    Model& m = *(*t)->model;
    const Tokenizer& tok = *(*t)->tokenizer;
    const std::vector<std::string> prompts = {"The lighthouse keeper wrote in his log that", "Once upon a time",
                                              "A list of prime numbers: 2, 3, 5,"};
    std::vector<std::string> plain;
    {
        Served s(m, tok, 0);
        for (const auto& p : prompts) plain.push_back(s.complete(p, 24)["choices"][0]["text"].get<std::string>());
    }
    Served spec(m, tok, 2);
    // One at a time, then all three at once (their verify steps in one batch).
    for (size_t i = 0; i < prompts.size(); ++i)
        EXPECT_EQ(spec.complete(prompts[i], 24)["choices"][0]["text"].get<std::string>(), plain[i]) << prompts[i];
    std::vector<std::string> together(prompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i)
        clients.emplace_back([&, i] { together[i] = spec.complete(prompts[i], 24)["choices"][0]["text"].get<std::string>(); });
    for (auto& c : clients) c.join();
    EXPECT_EQ(together, plain);
    const EngineStats st = spec.stats();
    EXPECT_GT(st.spec_steps, 0u);
    EXPECT_GT(st.draft_tokens, 0u);
    EXPECT_LE(st.draft_tokens, 2 * st.spec_steps);  // at most K = 2 per verify step
    const std::string text = spec.metrics();
    EXPECT_NE(text.find("dsv4_speculative_steps_total " + std::to_string(st.spec_steps)), std::string::npos) << text;
    EXPECT_NE(text.find("dsv4_speculative_draft_tokens_total"), std::string::npos);
    EXPECT_NE(text.find("dsv4_speculative_acceptance_ratio"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
