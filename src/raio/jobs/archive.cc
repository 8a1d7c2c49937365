#include "raio/jobs/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"

namespace raio::jobs {

namespace {

namespace fs = std::filesystem;

bool Excluded(const std::string& rel, const std::vector<std::string>& excludes) {
  for (const std::string& pattern : excludes) {
    std::string p = pattern;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p.starts_with("/")) p = p.substr(1);
    if (::fnmatch(p.c_str(), rel.c_str(), FNM_PATHNAME) == 0) return true;
    for (const auto& part : fs::path(rel)) {
      if (::fnmatch(p.c_str(), part.c_str(), 0) == 0) return true;
    }
  }
  return false;
}

struct ArchiveDeleter {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ReadDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};

la_ssize_t AppendToString(archive*, void* client, const void* buf, size_t n) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

// One file or directory to pack: where it is read from (maybe through symbolic links),
// its name in the archive, and the stat of what the name leads to.
struct PackItem {
  fs::path path;
  std::string rel;
  struct stat st;
};

// Lists `dir` (named `rel` in the archive) into `out`, depth first in name order. Symbolic
// links are followed, as Ray packs working directories: a link to a file is packed as that
// file's content under the link's name, a link to a directory as a directory with what is
// under it. A link that leads back into a directory being walked (a loop) and a link whose
// target is missing are left out. Stops early once `total` passes `max_bytes`.
absl::Status Walk(const fs::path& dir, const std::string& rel,
                  const std::vector<std::string>& excludes, uint64_t max_bytes,
                  std::vector<std::pair<dev_t, ino_t>>& ancestors, std::vector<PackItem>& out,
                  uint64_t& total) {
  std::error_code ec;
  std::vector<fs::path> children;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    children.push_back(it->path());
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot list '", dir.string(), "': ", ec.message()));
  }
  std::sort(children.begin(), children.end());
  for (const fs::path& child : children) {
    const std::string name = child.filename().string();
    const std::string child_rel = rel.empty() ? name : absl::StrCat(rel, "/", name);
    if (Excluded(child_rel, excludes)) continue;
    struct stat st {};
    if (::stat(child.c_str(), &st) != 0) continue;  // a dangling link, or gone meanwhile
    if (S_ISDIR(st.st_mode)) {
      const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
      if (std::find(ancestors.begin(), ancestors.end(), id) != ancestors.end()) continue;
      out.push_back({child, child_rel, st});
      ancestors.push_back(id);
      absl::Status s = Walk(child, child_rel, excludes, max_bytes, ancestors, out, total);
      ancestors.pop_back();
      if (!s.ok()) return s;
    } else if (S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_size);
      out.push_back({child, child_rel, st});
    }                                                // sockets, fifos, devices are left out
    if (total > max_bytes) return absl::OkStatus();  // the caller refuses it
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PackDirectory(const std::string& dir,
                                          const std::vector<std::string>& excludes,
                                          uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("working directory '", dir, "' is not a directory"));
  }
  // First the list and the size, so that a directory over the limit is refused before
  // anything is read. Symbolic links are followed, as Ray does (see Walk).
  std::vector<PackItem> entries;
  uint64_t total = 0;
  std::vector<std::pair<dev_t, ino_t>> ancestors;
  struct stat root_st {};
  if (::stat(dir.c_str(), &root_st) == 0) ancestors.emplace_back(root_st.st_dev, root_st.st_ino);
  if (absl::Status s = Walk(fs::path(dir), "", excludes, max_bytes, ancestors, entries, total);
      !s.ok()) {
    return s;
  }
  if (total > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("working directory '", dir, "' holds ", total, " bytes, over the limit of ",
                     max_bytes, " bytes; leave files out with runtime_env excludes"));
  }
  std::string out;
  std::unique_ptr<archive, ArchiveDeleter> a(archive_write_new());
  archive_write_set_format_zip(a.get());
  // No padding of the last block (libarchive pads to 10 KiB blocks by default): the package
  // is exactly the zip, so the server's size limit applies to what the directory holds.
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open(a.get(), &out, nullptr, AppendToString, nullptr) != ARCHIVE_OK) {
    return absl::InternalError(archive_error_string(a.get()));
  }
  std::string data;
  for (const PackItem& e : entries) {
    const std::string& rel = e.rel;
    std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(),
                                                                   archive_entry_free);
    archive_entry_set_pathname(entry.get(), rel.c_str());
    archive_entry_copy_stat(entry.get(), &e.st);
    data.clear();
    if (S_ISREG(e.st.st_mode)) {
      std::ifstream in(e.path, std::ios::binary);
      data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!in && !in.eof()) {
        return absl::InternalError(absl::StrCat("cannot read '", e.path.string(), "'"));
      }
      archive_entry_set_size(entry.get(), static_cast<la_int64_t>(data.size()));
    }
    if (archive_write_header(a.get(), entry.get()) != ARCHIVE_OK) {
      return absl::InternalError(
          absl::StrCat("cannot archive '", rel, "': ", archive_error_string(a.get())));
    }
    if (!data.empty() && archive_write_data(a.get(), data.data(), data.size()) !=
                             static_cast<la_ssize_t>(data.size())) {
      return absl::InternalError(
          absl::StrCat("cannot archive '", rel, "': ", archive_error_string(a.get())));
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return absl::InternalError(archive_error_string(a.get()));
  }
  return out;
}

absl::Status UnpackArchive(std::string_view bytes, const std::string& dest) {
  std::unique_ptr<archive, ReadDeleter> in(archive_read_new());
  archive_read_support_format_zip(in.get());
  archive_read_support_format_tar(in.get());
  archive_read_support_filter_gzip(in.get());
  if (archive_read_open_memory(in.get(), bytes.data(), bytes.size()) != ARCHIVE_OK) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the working directory is not a zip or tar archive: ", archive_error_string(in.get())));
  }
  std::unique_ptr<archive, ArchiveDeleter> out(archive_write_disk_new());
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  archive_entry* entry = nullptr;
  for (;;) {
    int rc = archive_read_next_header(in.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(
          absl::StrCat("a corrupt working directory archive: ", archive_error_string(in.get())));
    }
    const char* raw = archive_entry_pathname(entry);
    std::string name = raw != nullptr ? raw : "";
    // Entries are placed under `dest` (an absolute path), so an absolute or climbing name
    // is refused here rather than by libarchive's checks.
    bool climbs = name.empty() || fs::path(name).is_absolute();
    for (const auto& part : fs::path(name)) climbs = climbs || part == "..";
    if (climbs) {
      return absl::InvalidArgumentError(
          absl::StrCat("the working directory archive has an entry outside it: '", name, "'"));
    }
    fs::path target = fs::path(dest) / name;
    archive_entry_set_pathname(entry, target.c_str());
    if (const char* hl = archive_entry_hardlink(entry); hl != nullptr) {
      bool bad = fs::path(hl).is_absolute();
      for (const auto& part : fs::path(hl)) bad = bad || part == "..";
      if (bad) {
        return absl::InvalidArgumentError(
            absl::StrCat("the working directory archive links outside it: '", hl, "'"));
      }
      archive_entry_set_hardlink(entry, (fs::path(dest) / hl).c_str());
    }
    if (const char* sl = archive_entry_symlink(entry); sl != nullptr) {
      // A link is written as is, so its target must stay inside the directory: the job
      // would otherwise read (and write) through it outside its directory.
      fs::path resolved = (fs::path(name).parent_path() / sl).lexically_normal();
      bool bad = fs::path(sl).is_absolute() || resolved.empty();
      for (const auto& part : resolved) bad = bad || part == "..";
      if (bad) {
        return absl::InvalidArgumentError(
            absl::StrCat("the working directory archive has a symbolic link '", name,
                         "' that leads outside it: '", sl, "'"));
      }
    }
    if (archive_write_header(out.get(), entry) < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot unpack '", name, "': ", archive_error_string(out.get())));
    }
    const void* buf = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    while ((rc = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
      if (archive_write_data_block(out.get(), buf, size, offset) < ARCHIVE_WARN) {
        return absl::InternalError(
            absl::StrCat("cannot write '", name, "': ", archive_error_string(out.get())));
      }
    }
    if (rc != ARCHIVE_EOF) {
      return absl::InvalidArgumentError(
          absl::StrCat("a corrupt entry '", name, "': ", archive_error_string(in.get())));
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN) {
      return absl::InternalError(
          absl::StrCat("cannot finish '", name, "': ", archive_error_string(out.get())));
    }
  }
  return absl::OkStatus();
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::vector<std::string> ListRegularFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) {
      out.push_back(it->path().lexically_relative(dir).generic_string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace raio::jobs
