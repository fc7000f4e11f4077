// Loading and indexing the byte-level BPE vocabulary (see vocab.h).
#include "tokenizer/vocab.h"

#include <cstdio>
#include <functional>
#include <limits>

#include "format/gguf.h"
#include "tokenizer/utf8.h"

namespace dsv4 {

namespace {

// GPT-2's table: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the remaining 68 bytes
// (controls, space, DEL, 0x80..0xA0, soft hyphen) are given U+0100, U+0101, ... in increasing byte order.
constexpr bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteLevelTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 256 + 68> to_byte{};
};

constexpr ByteLevelTables make_byte_level_tables() {
    ByteLevelTables t{};
    for (auto& b : t.to_byte) b = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = byte_is_printable(b) ? static_cast<uint32_t>(b) : next++;
        t.to_cp[b] = cp;
        t.to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
}

constexpr ByteLevelTables kByteLevel = make_byte_level_tables();
static_assert(kByteLevel.to_cp[' '] == 0x120, "space must map to U+0120 ('Ġ')");
static_assert(kByteLevel.to_cp['\n'] == 0x10A, "newline must map to U+010A ('Ċ')");

// Decode one UTF-8 character of a (valid) token text; returns the code point and advances i.
uint32_t next_codepoint(std::string_view s, size_t& i) {
    const Utf8Scan r = utf8_scan(s.data() + i, s.size() - i);
    const auto* u = reinterpret_cast<const unsigned char*>(s.data() + i);
    if (r.kind != Utf8Kind::complete) {
        i += r.kind == Utf8Kind::invalid ? r.len : s.size() - i;
        return 0xFFFFFFFFu;
    }
    uint32_t cp = 0;
    switch (r.len) {
        case 1: cp = u[0]; break;
        case 2: cp = (u[0] & 0x1Fu) << 6 | (u[1] & 0x3Fu); break;
        case 3: cp = (u[0] & 0x0Fu) << 12 | (u[1] & 0x3Fu) << 6 | (u[2] & 0x3Fu); break;
        default: cp = (u[0] & 0x07u) << 18 | (u[1] & 0x3Fu) << 12 | (u[2] & 0x3Fu) << 6 | (u[3] & 0x3Fu); break;
    }
    i += r.len;
    return cp;
}

// The bytes a normal token stands for: each character of its text maps back through the byte-level table.
// A character outside the table (not produced by a byte-level converter) is kept as its own UTF-8, so a
// stray token still decodes to something readable instead of failing.
void byte_level_decode(std::string_view text, std::string& out) {
    size_t i = 0;
    while (i < text.size()) {
        const size_t start = i;
        const uint32_t cp = next_codepoint(text, i);
        const int b = byte_level_byte(cp);
        if (b >= 0) {
            out += static_cast<char>(b);
        } else {
            out.append(text.substr(start, i - start));
        }
    }
}

// "<0xHH>" -> HH, else -1 (SentencePiece-style byte tokens, type 6).
int parse_byte_token(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

uint64_t merge_hash(uint64_t key, uint64_t mask) { return (key * 0x9E3779B97F4A7C15ull >> 17) & mask; }

}  // namespace

uint32_t byte_level_codepoint(uint8_t b) { return kByteLevel.to_cp[b]; }

int byte_level_byte(uint32_t cp) { return cp < kByteLevel.to_byte.size() ? kByteLevel.to_byte[cp] : -1; }

std::optional<int32_t> Vocab::find(std::string_view text) const {
    const uint64_t h = std::hash<std::string_view>{}(text);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t i = h & text_mask_;; i = (i + 1) & text_mask_) {
        const TextSlot& s = text_index_[i];
        if (s.id < 0) return std::nullopt;
        if (s.tag == tag && texts_.get(s.id) == text) return s.id;
    }
}

const Vocab::Merge* Vocab::find_merge(int32_t left, int32_t right) const {
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
    for (uint64_t h = merge_hash(key, merge_mask_);; h = (h + 1) & merge_mask_) {
        const MergeSlot& s = merge_table_[h];
        if (s.merge.rank < 0) return nullptr;
        if (s.key == key) return &s.merge;
    }
}

Status Vocab::build_merges(const std::vector<std::string_view>& merges) {
    uint64_t cap = 16;
    while (cap < merges.size() * 2) cap <<= 1;  // load factor <= 1/2 keeps probe chains short
    merge_table_.assign(cap, MergeSlot{});
    merge_mask_ = cap - 1;
    std::string joined;
    for (size_t r = 0; r < merges.size(); ++r) {
        const std::string_view m = merges[r];
        const size_t sp = m.find(' ');
        if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != m.npos) {
            return make_error("tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + std::string(m) +
                              "' is not two tokens separated by one space");
        }
        const std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
        joined.assign(left);
        joined += right;
        const auto l = find(left), rt = find(right), j = find(joined);
        if (!l || !rt || !j) {
            return make_error("tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + std::string(m) +
                              "' names a token that is not in the vocabulary ('" +
                              std::string(!l ? left : !rt ? right : std::string_view(joined)) + "')");
        }
        const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(*l)) << 32 | static_cast<uint32_t>(*rt);
        for (uint64_t h = merge_hash(key, merge_mask_);; h = (h + 1) & merge_mask_) {
            MergeSlot& s = merge_table_[h];
            if (s.merge.rank < 0) {
                s.key = key;
                s.merge = Merge{static_cast<int32_t>(r), *j};
                ++n_merges_;
                break;
            }
            if (s.key == key) break;  // a repeated pair keeps its first (lowest) rank
        }
    }
    return {};
}

Result<Vocab> Vocab::build(const std::vector<std::string_view>& tokens, const std::vector<int32_t>& types,
                           const std::vector<std::string_view>& merges, const std::string& pre, int32_t bos,
                           int32_t eos, int32_t pad, bool add_bos) {
    if (tokens.empty()) return make_error("tokenizer.ggml.tokens is empty");
    if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        return make_error("tokenizer.ggml.tokens has too many entries");
    }
    if (types.size() != tokens.size()) {
        return make_error("tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                          " entries but tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
    }
    const auto n = static_cast<int64_t>(tokens.size());
    auto check_id = [&](const char* key, int32_t id) -> Status {
        if (id < -1 || id >= n) {
            return make_error(std::string(key) + " = " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(n) + " tokens");
        }
        return {};
    };
    DSV4_TRY(check_id("tokenizer.ggml.bos_token_id", bos));
    DSV4_TRY(check_id("tokenizer.ggml.eos_token_id", eos));
    DSV4_TRY(check_id("tokenizer.ggml.padding_token_id", pad));

    Vocab v;
    v.pre_ = pre;
    v.bos_ = bos, v.eos_ = eos, v.pad_ = pad, v.add_bos_ = add_bos;
    v.types_.reserve(tokens.size());
    std::string decoded;
    uint64_t total = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const std::string_view t = tokens[i];
        const int32_t ty = types[i];
        if (ty < 0 || ty > 6) {
            return make_error("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(ty) +
                              " is not a known token type");
        }
        total += t.size();
        if (total > std::numeric_limits<uint32_t>::max() / 2) return make_error("tokenizer.ggml.tokens is too large");
        const auto type = static_cast<TokenType>(ty);
        decoded.clear();
        const int byte = type == TokenType::byte ? parse_byte_token(t) : -1;
        if (byte >= 0) {
            decoded += static_cast<char>(byte);
        } else if (type == TokenType::normal || type == TokenType::undefined) {
            byte_level_decode(t, decoded);
        } else {
            decoded.assign(t);  // control, user-defined, unused, unknown: their text is what they mean
        }
        v.types_.push_back(type);
        v.texts_.add(t);
        v.bytes_.add(decoded);
        if (type == TokenType::control || type == TokenType::user_defined) {
            if (!t.empty()) v.special_ids_.push_back(static_cast<int32_t>(i));
        }
    }
    // Index by text. A repeated text keeps its first id.
    uint64_t cap = 16;
    while (cap < tokens.size() * 2) cap <<= 1;  // load factor <= 1/2
    v.text_index_.assign(cap, TextSlot{});
    v.text_mask_ = cap - 1;
    for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
        const std::string_view t = v.texts_.get(id);
        const uint64_t h = std::hash<std::string_view>{}(t);
        const auto tag = static_cast<uint32_t>(h >> 32);
        for (uint64_t i = h & v.text_mask_;; i = (i + 1) & v.text_mask_) {
            TextSlot& s = v.text_index_[i];
            if (s.id < 0) {
                s = TextSlot{tag, id};
                break;
            }
            if (s.tag == tag && v.texts_.get(s.id) == t) break;
        }
    }

    std::string cp_text;
    for (int b = 0; b < 256; ++b) {
        cp_text.clear();
        utf8_append(cp_text, byte_level_codepoint(static_cast<uint8_t>(b)));
        const auto id = v.find(cp_text);
        if (!id) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02X", b);
            return make_error(std::string("tokenizer.ggml.tokens has no token for byte ") + hex +
                              " (byte-level text '" + cp_text + "')");
        }
        v.byte_tokens_[b] = *id;
    }
    DSV4_TRY(v.build_merges(merges));
    return v;
}

Result<Vocab> Vocab::from_data(const VocabData& data) {
    const std::vector<std::string_view> tokens(data.tokens.begin(), data.tokens.end());
    const std::vector<std::string_view> merges(data.merges.begin(), data.merges.end());
    return build(tokens, data.types, merges, data.pre, data.bos, data.eos, data.pad, data.add_bos);
}

Result<Vocab> Vocab::load(const GgufFile& file) {
    auto model = file.get_str("tokenizer.ggml.model");
    if (!model.ok()) return std::move(model).take_error();
    if (model->compare("gpt2") != 0) {
        return make_error("tokenizer.ggml.model is '" + *model + "'; only byte-level BPE ('gpt2') is supported");
    }
    std::string pre;
    if (file.has("tokenizer.ggml.pre")) {
        DSV4_ASSIGN_OR_RETURN(pre, file.get_str("tokenizer.ggml.pre"));
    } else {
        return make_error("tokenizer.ggml.pre is missing (which pre-tokenizer the model uses)");
    }
    DSV4_ASSIGN_OR_RETURN(const auto tokens, file.get_arr_str("tokenizer.ggml.tokens"));
    DSV4_ASSIGN_OR_RETURN(const auto types, file.get_arr_i32("tokenizer.ggml.token_type"));
    DSV4_ASSIGN_OR_RETURN(const auto merges, file.get_arr_str("tokenizer.ggml.merges"));
    auto optional_id = [&](const char* key) -> Result<int32_t> {
        if (!file.has(key)) return -1;
        DSV4_ASSIGN_OR_RETURN(const uint32_t id, file.get_u32(key));
        if (id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
            return make_error(std::string(key) + " = " + std::to_string(id) + " is out of range");
        }
        return static_cast<int32_t>(id);
    };
    DSV4_ASSIGN_OR_RETURN(const int32_t bos, optional_id("tokenizer.ggml.bos_token_id"));
    DSV4_ASSIGN_OR_RETURN(const int32_t eos, optional_id("tokenizer.ggml.eos_token_id"));
    DSV4_ASSIGN_OR_RETURN(const int32_t pad, optional_id("tokenizer.ggml.padding_token_id"));
    bool add_bos = bos >= 0;
    if (file.has("tokenizer.ggml.add_bos_token")) {
        DSV4_ASSIGN_OR_RETURN(add_bos, file.get_bool("tokenizer.ggml.add_bos_token"));
    }
    return build(tokens, types, merges, pre, bos, eos, pad, add_bos);
}

Result<Vocab> Vocab::from_gguf(const GgufFile& file) {
    auto r = load(file);
    if (!r.ok()) return make_error(file.path() + ": " + r.error());
    return r;
}

}  // namespace dsv4
