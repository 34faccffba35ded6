// Reading the files the network programs take: PEM certificates, credentials.
#pragma once

#include <string>

namespace cgp::transport {

// The whole file, bytes as they are. False if it cannot be read.
bool read_file(const std::string& path, std::string& out);
// A credential file: its content without trailing newlines (which editors and `echo` add).
// False if it cannot be read.
bool read_secret(const std::string& path, std::string& out);

}  // namespace cgp::transport
