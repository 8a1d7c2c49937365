// RAIO_EXPORT: marks what libraio.so exports to the programs that link it.
//
// libraio.so and the internal libraries inside it are compiled with -fvisibility=hidden
// and -fvisibility-inlines-hidden, so that only what carries RAIO_EXPORT is in its dynamic
// symbol table. RAIO_EXPORT goes on exactly the declarations in include/raio/ that a user's
// program needs at link or run time:
// - functions declared here and defined in libraio (raio::Init, and the raio::internal
//   entry points that the header templates call: SubmitTask, GetObject, ...);
// - classes with members defined in libraio (raio::internal::ContainedRefs);
// - the exception classes of errors.h, so that their type_info and vtables are one per
//   process and a user's `catch (const raio::TaskError&)` matches what libraio throws.
// Everything else in libraio (abseil, Boost, protobuf, spdlog, the node, head, worker and
// rpc code) is hidden; the test library_exports_only_public_api checks this
// (tests/library/check_exports.py). See docs/design/libraries.md.
// Thread-safety: a macro; nothing to synchronise.
#pragma once

#define RAIO_EXPORT __attribute__((visibility("default")))
