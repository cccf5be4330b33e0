#pragma once
// Outputs never destroy anything. Every file a command writes goes through this header:
//
//  * an output that is the same file (device and inode, so also through links and other names)
//    as an input of the command is refused;
//  * a directory, block device, socket or read-only file is refused, never replaced;
//  * a symlink is written through to its target (the link stays a link);
//  * a character device (/dev/null, a terminal) or a FIFO / pipe is written through in place,
//    not replaced by a regular file (a FIFO without a reader is refused instead of blocking);
//  * a regular file is replaced atomically: a fresh temporary beside it, flushed, fsync'd and
//    renamed over it, keeping its permission bits.
//
// Inputs are recorded process-wide as they are read (read_json_file and every other reader call
// note_input_file), rather than passed by each command: only the readers know every file a
// command reads, including the ones a scenario or sweep spec names (cluster and job files,
// calibration data, catalogs). Commands call check_outputs() after loading their inputs and
// before their work, so a bad output fails in a second rather than after a long run; the write
// itself repeats the checks (it also sees inputs read after the pre-flight). Every refusal is an
// IoError (exit code 5) naming the output, what it is and why.
#include <filesystem>
#include <string>
#include <vector>

namespace cephalo {

// Records that this process read `file` (identified by device and inode; a file that cannot be
// stat'ed is ignored: there is nothing an output could overwrite).
void note_input_file(const std::filesystem::path& file);
// Forgets every recorded input (for tests that run several commands in one process).
void forget_input_files();

// One output of a command: `what` names it in messages (usually its flag, "--trace").
// An empty `file` means the output was not asked for and is skipped.
struct OutputTarget {
  std::string what;
  std::filesystem::path file;
};

// Pre-flight of one output file: throws IoError unless write_file_atomically(file, ...) would
// succeed as far as can be known now (kind, not an input, writable, its folder exists and is
// writable).
void check_output_file(const std::filesystem::path& file, const std::string& what = "");
// A folder a command will create files in (e.g. a checkpoint folder): it is a writable folder,
// or it does not exist yet and its nearest existing parent is a writable folder.
void check_output_folder(const std::filesystem::path& dir, const std::string& what = "");
// Every output of a command: each checked as above, and no two of them the same file.
void check_outputs(const std::vector<OutputTarget>& outputs);

// Writes `text` to `file` by the rules above. IoError on any refusal or failure; a failed write
// leaves the previous content in place. (Also declared in json_reader.hpp, where callers have
// long found it.)
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

// Writes a file the program owns rather than one the user named (the start-up cache's entry in
// a cache folder another process may share): a fresh temporary beside it renamed over the name
// itself. Whatever is at the name is replaced, never written through: a symbolic link planted
// there is replaced by the file (its target untouched), a hard link loses this name only.
// Anything that is neither a regular file nor a link (a folder, FIFO, device) is refused. The
// inputs are not consulted (the name is not one of the user's files). IoError on any failure;
// the previous content stays in place.
void replace_file_atomically(const std::filesystem::path& file, const std::string& text);

}  // namespace cephalo
