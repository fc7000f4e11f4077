#include "util/test_files.h"

#include <sys/wait.h>

#include <cstdio>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace dsv4::test {

Status write_gguf_copy(const GgufFile& src, const std::filesystem::path& out, const GgufCopy& edit) {
    GgufWriter w;
    for (const auto& [k, v] : src.metadata())
        if (k != edit.drop_key) w.copy_value(k, v);
    if (edit.meta) edit.meta(w);
    for (const GgufTensor& t : src.tensors()) {
        if (edit.keep && !edit.keep(t.name)) continue;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
        DSV4_TRY(w.add_tensor_data(edit.rename ? edit.rename(t.name) : t.name, t.type, ne, std::move(bytes)));
    }
    return w.write(out.string());
}

CmdResult run_dsv4(const std::string& args) {
    CmdResult r;
    std::FILE* pipe = ::popen((std::string(DSV4_BIN) + " " + args + " 2>&1").c_str(), "r");
    if (!pipe) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
    const int st = ::pclose(pipe);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

}  // namespace dsv4::test
