// The read-only commands of the raio CLI: `raio status`, `raio config`, `raio list objects`,
// `raio list actors`, `raio list nodes`. Each asks the head over TCP (one request, the control RPC
// timeout) and prints text or, with `json`, one JSON document. `address_flag` is --address: a
// host:port, "auto" or empty (then RAIO_ADDRESS, then the cluster `raio start` recorded).
// Each returns the process exit code: 0, or 1 when no cluster is found or the head does
// not answer (the reason goes to stderr).
#pragma once

#include <string>

namespace raio::cli {

// The head address `address_flag` resolves to, or "" when none is found
// (raio_main.cc: it reads the cluster record).
std::string ResolveAddress(const std::string& flag);

int Status(const std::string& address_flag, bool json);
int ShowConfig(const std::string& address_flag, bool json);
int ListActors(const std::string& address_flag, bool json);
int ListObjects(const std::string& address_flag, bool json);
int ListNodes(const std::string& address_flag, bool json);
// `raio list placement-groups`: id, name, strategy, state, bundles and their nodes.
int ListPlacementGroups(const std::string& address_flag, bool json);

}  // namespace raio::cli
