#include "model/requantize.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/quant.h"
#include "model/imatrix.h"

namespace dsv4 {

namespace {

constexpr int64_t kChunkFloats = int64_t(8) << 20;  // 32 MB of f32 per chunk

Status write_all(std::FILE* out, const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, out) != n) return make_error(std::string("write failed: ") + std::strerror(errno));
    return {};
}

Status requantize_tensor(const GgufTensor& t, GgmlType type, const Imatrix* im, std::FILE* out, ThreadPool& pool) {
    if (type == t.type) return write_all(out, t.data, t.n_bytes);
    const int64_t ne0 = t.ne[0];
    const int64_t rows = ne0 ? t.n_elems() / ne0 : 0;
    // Importance weights per matrix (one per expert of a stack), when the imatrix has them.
    const int64_t rows_per_mat = t.n_dims >= 3 ? t.ne[1] : rows;
    const int64_t n_mat = rows_per_mat ? rows / rows_per_mat : 0;
    std::vector<const float*> weights((size_t)n_mat, nullptr);
    if (im && uses_importance(type)) {
        for (int64_t m = 0; m < n_mat; ++m) {
            DSV4_ASSIGN_OR_RETURN(weights[(size_t)m], im->weights(t.name, ne0, n_mat, m));
        }
    }
    const size_t in_row = t.row_bytes();
    const size_t out_row = ggml_row_bytes(ggml_traits(type), ne0);
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, kChunkFloats / std::max<int64_t>(ne0, 1)));
    std::vector<float> f32((size_t)(chunk * ne0));
    std::vector<uint8_t> bytes((size_t)chunk * out_row);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t nr = std::min(chunk, rows - r0);
        pool.parallel_for(nr, 1, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) {
                float* row = f32.data() + i * ne0;
                dequantize_row(t.type, t.data + (size_t)(r0 + i) * in_row, row, ne0);
                const float* w = n_mat ? weights[(size_t)((r0 + i) / rows_per_mat)] : nullptr;
                quantize_row_weighted(type, row, bytes.data() + (size_t)i * out_row, ne0, w);
            }
        });
        DSV4_TRY(write_all(out, bytes.data(), (size_t)nr * out_row));
    }
    return {};
}

}  // namespace

Status requantize_gguf(const std::string& in_path, const std::string& out_path, const RequantizeOptions& o) {
    DSV4_ASSIGN_OR_RETURN(auto in, GgufFile::open(in_path));
    if (in_path == out_path) return make_error("the output '" + out_path + "' is the input");
    GgufWriter w;
    w.set_alignment((uint32_t)in->alignment());
    for (const auto& [key, value] : in->metadata()) {
        if (key == "general.file_type" || key.rfind("split.", 0) == 0) continue;
        w.copy_value(key, value);
    }
    bool quantized = false;
    ThreadPool pool(std::max(1, o.threads));
    for (const GgufTensor& t : in->tensors()) {
        if (!t.data) return make_error("tensor '" + t.name + "' of '" + in_path + "' has no data");
        std::string note;
        const GgmlType type = select_quant_type(t, o.selection, &note);
        if (!note.empty() && o.note) o.note(note);
        if (type != t.type) {
            if (!ggml_traits(t.type).is_float_weight)
                return make_error("tensor '" + t.name + "' is " + std::string(ggml_type_name(t.type)) +
                                  ", which has no float values to quantize");
            if (!has_quantizer(type))
                return make_error("tensor '" + t.name + "': no quantizer for " + std::string(ggml_type_name(type)));
        }
        quantized |= ggml_traits(type).block_elems > 1;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        const GgufTensor* tp = &t;
        const Imatrix* im = o.imatrix;
        DSV4_TRY(w.add_tensor(t.name, type, ne, [tp, type, im, &pool](std::FILE* out) -> Status {
            Status st = requantize_tensor(*tp, type, im, out, pool);
            if (!st.ok()) return make_error("tensor '" + tp->name + "': " + st.error());
            return {};
        }));
    }
    if (quantized && !in->has("general.quantization_version")) w.set_u32("general.quantization_version", 2);
    return w.write(out_path, o.progress);
}

}  // namespace dsv4
