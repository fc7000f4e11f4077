// Splits a chat answer's deltas into the content blocks the Anthropic Messages and OpenAI Responses APIs
// stream: a reasoning block, a text block, one block per tool call, each opened, appended to and closed in
// the order the model wrote them. Both APIs' stream writers consume these events, so the splitting lives
// once. Engine-free and HTTP-free.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "server/openai_response.h"

namespace dsv4::server {

enum class BlockKind { reasoning, text, tool_call };

struct BlockEvent {
    enum class Type { open, append, close };
    Type type = Type::open;
    BlockKind kind = BlockKind::text;
    size_t index = 0;       // the block's position in the answer (0, 1, ...)
    std::string text;       // append: reasoning or text, or a tool call's arguments (JSON text)
    ToolCallDelta tool;     // tool_call blocks: the call (open carries it, append its arguments)
};

class ChatBlocks {
public:
    std::vector<BlockEvent> push(const ChatDelta& delta);
    // Closes the block still open (the answer is over).
    std::vector<BlockEvent> finish();
    size_t n_blocks() const { return next_index_; }

private:
    void ensure(BlockKind kind, std::vector<BlockEvent>& out);
    void close(std::vector<BlockEvent>& out);

    bool open_ = false;
    BlockKind kind_ = BlockKind::text;
    size_t index_ = 0;
    size_t next_index_ = 0;
};

}  // namespace dsv4::server
