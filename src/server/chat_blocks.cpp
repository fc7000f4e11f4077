// Content-block splitting (see chat_blocks.h). A delta holds reasoning, then content, then whole tool calls,
// which is also the order the grammar allows them in, so a block never reopens once another began.
#include "server/chat_blocks.h"

namespace dsv4::server {

void ChatBlocks::close(std::vector<BlockEvent>& out) {
    if (!open_) return;
    BlockEvent e;
    e.type = BlockEvent::Type::close;
    e.kind = kind_;
    e.index = index_;
    out.push_back(std::move(e));
    open_ = false;
}

void ChatBlocks::ensure(BlockKind kind, std::vector<BlockEvent>& out) {
    if (open_ && kind_ == kind && kind != BlockKind::tool_call) return;
    close(out);
    open_ = true;
    kind_ = kind;
    index_ = next_index_++;
    BlockEvent e;
    e.type = BlockEvent::Type::open;
    e.kind = kind;
    e.index = index_;
    out.push_back(std::move(e));
}

std::vector<BlockEvent> ChatBlocks::push(const ChatDelta& d) {
    std::vector<BlockEvent> out;
    auto append = [&](BlockKind kind, const std::string& text) {
        ensure(kind, out);
        BlockEvent e;
        e.type = BlockEvent::Type::append;
        e.kind = kind;
        e.index = index_;
        e.text = text;
        out.push_back(std::move(e));
    };
    if (!d.reasoning.empty()) append(BlockKind::reasoning, d.reasoning);
    if (!d.content.empty()) append(BlockKind::text, d.content);
    for (const ToolCallDelta& t : d.tool_calls) {
        ensure(BlockKind::tool_call, out);
        out.back().tool = t;
        BlockEvent e;
        e.type = BlockEvent::Type::append;
        e.kind = BlockKind::tool_call;
        e.index = index_;
        e.text = t.call.arguments;
        e.tool = t;
        out.push_back(std::move(e));
        // A call arrives whole: nothing more can join its block.
        close(out);
    }
    return out;
}

std::vector<BlockEvent> ChatBlocks::finish() {
    std::vector<BlockEvent> out;
    close(out);
    return out;
}

}  // namespace dsv4::server
