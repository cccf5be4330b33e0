#pragma once
// `cephalo profile` between its flags and its printing (the measuring itself is profiler.hpp):
// the micro-batch sizes as the flag writes them, the sweep file's location, this rank's device
// and communicator, the profiler, the provenance and the files rank 0 writes. One function, so
// that the command line holds only its flags, their checks and the printing.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/backend/profiler.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/specs.hpp"

namespace cephalo::backend {

// Micro-batch sizes as `--micro-batches` writes them: "1..K" (every size from 1 to K), "K"
// (the same), "LO..HI" or a list "1,2,4,8"; sorted, without repeats, each from 1 to 4096.
// nullopt for anything else, so that the caller names the flag in its own message.
std::optional<std::vector<int>> parse_micro_batch_sizes(std::string_view text);

struct ProfileRequest {
  std::string device = "cpu";  // cpu | cuda
  ModelSpec model;             // a catalog model, its sequence length checked by the caller
  int seq = 0;
  std::string record_as;  // catalog device the rows are recorded under ("": "cpu")
  int threads = 1;        // CPU threads of this rank
  // What is measured and how; record_as and model_name are filled from the fields above.
  ProfilerOptions profiler;
  // The calibration file ("-o", "" for none) and the collective sweep's ("--sweep-out"; "" for
  // beside the calibration file under mpirun).
  std::string output, sweep_output;
  std::string tool;  // the record's "tool" (provenance)
};

// What `cephalo profile` takes as text, as its flags write it.
struct ProfileRequestText {
  std::string model;                   // a catalog model (the flag's validator found it)
  std::string micro_batches = "1..4";  // parse_micro_batch_sizes
  std::string dtype = "fp32";          // compute type of parameters and activations
  std::string max_bytes = "16MiB";     // largest collective and copy size, at least 64KiB
  bool no_collectives = false;
};

// `request` with the text parsed into it and every rule that needs more than one flag checked:
// the sequence against the model's learned positions (the job parser's rule), a size the
// sweep can use, and `--device cuda` naming the catalog GPU its rows are recorded under.
// ValidationError at `source` naming the flag (`--micro-batches`, `--seq`, `--max-bytes`,
// `--as`) otherwise.
ProfileRequest complete_profile_request(ProfileRequest request, const ProfileRequestText& text,
                                        const std::string& source);

// The collective sweep's file: sweep_output when given, else none for one process or without
// collectives, else sweep_file_beside(output). ValidationError at "command line" naming
// --sweep-out when it is given to a single process (which measures no collective).
std::string profile_sweep_file(const ProfileRequest& request, int world_size);

struct ProfileOutcome {
  costmodels::MeasuredProfile profile;
  Json record;              // profile_to_json(profile), on rank 0
  std::string device_name;  // as the device names itself ("CPU (4 threads)", the GPU's name)
  std::string recorded_as;  // the catalog device of the rows
  bool lead = false;        // rank 0: the one that writes and prints
};

// Profiles on this rank (collective: every rank of the job calls it). Every output location is
// checked before measuring (core/output_file.hpp, named by their flags); rank 0 then stamps the
// provenance and writes the calibration file and the sweep, saying so. `say` gets every
// progress line on every rank, without the "profile: " the command prints before them.
ProfileOutcome profile_this_rank(const MpiRuntime& mpi, const ProfileRequest& request,
                                 const std::function<void(const std::string&)>& say);

// What `cephalo profile` prints on rank 0: which model, sequence and device, then the
// measured tables (costmodels' render_profile_tables).
std::string render_profile_outcome(const ProfileOutcome& outcome, const ProfileRequest& request);

}  // namespace cephalo::backend
