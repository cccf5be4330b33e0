#pragma once
// The pipeline schedule, once: in which order each pipeline stage runs the forward and backward
// passes of an iteration's micro-batches, how many micro-batches' activations each stage holds
// at once, and how long the iteration takes when every step starts as soon as its inputs have
// arrived. The graph builder, the memory model, the planner and the backend are meant to read
// these answers from here, so no reader restates a schedule (core/README.md, "The pipeline
// schedule"; DESIGN §4, "Model split").
//
//   pipeline::stage_orders(4, 8, {Kind::OneFOneB})       // per stage: F0 F1 F2 F3 B0 F4 B1 ...
//   pipeline::peak_in_flight(0, 4, 8, {Kind::OneFOneB})  // 4 = min(m, p − s)
//   pipeline::pipeline_makespan(4, 8, schedule, times)   // exact event-by-event evaluation
//
// Vocabulary. p stages (0 = the first, which reads the data; p − 1 = the last, which computes
// the loss), m micro-batches per iteration, all of them through every stage. An interleaved
// schedule with V virtual stages per stage cuts the model into p·V chunks in layer order;
// virtual stage k = c·p + s is chunk c of stage s (Megatron-LM's layout: stage 0 holds the
// first and the (p+1)-th chunk of layers, and so on), so a micro-batch's forward visits stages
// 0, 1, ..., p − 1, 0, 1, ... V times. Without interleaving V = 1 and chunk is always 0.
//
// Dependencies (what a step waits for beside the previous step of its own stage): the forward
// of micro-batch i on virtual stage k needs the forward of i on virtual stage k − 1 (its
// activations, sent point to point); the backward of i on virtual stage k needs the backward of
// i on k + 1 (the gradient of its output), and on the last virtual stage the forward of i there
// (the loss). A stage runs one step at a time, in its order. Sends never block the sender.
#include <span>
#include <string>
#include <vector>

namespace cephalo::pipeline {

struct PipelineSchedule {
  // GPipe: every forward, then every backward (in micro-batch order): simple, holds all m.
  // OneFOneB: PipeDream-flush / Megatron's default: stage s runs p − s − 1 warm-up forwards,
  // then alternates one forward and one backward, then the remaining backwards; same bubble as
  // GPipe, but holds at most p − s micro-batches. Interleaved: Megatron's interleaved 1F1B
  // over V virtual stages per stage (Narayanan et al., SC'21): the bubble shrinks by V.
  enum class Kind { GPipe, OneFOneB, Interleaved };
  Kind kind = Kind::OneFOneB;
  int virtual_stages = 1;  // V: 1 unless Interleaved (then >= 2)

  bool operator==(const PipelineSchedule&) const = default;
};
// The largest V accepted (a chunk is at least one layer, so more is never useful).
constexpr int kMaxVirtualStages = 1024;

// "gpipe", "1f1b", "interleaved:V" (the plan key's and the command line's spelling).
std::string to_string(const PipelineSchedule& schedule);
// GPipe, 1F1B, "interleaved 1F1B (V=2)": for tables and describe().
std::string display_name(const PipelineSchedule& schedule);
// Parses the spelling above; throws ValidationError at `file` and `where` naming the value and
// the allowed spellings (V an integer from 2 to kMaxVirtualStages).
PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& file,
                                         const std::string& where);

enum class Pass { Forward, Backward };

// One step of a stage's order: a forward or backward pass of one micro-batch through one of the
// stage's chunks (the chunk's layers, for the micro-batch's samples).
struct Step {
  Pass pass = Pass::Forward;
  int micro_batch = 0;
  int chunk = 0;  // 0..V−1; virtual stage chunk·p + stage

  bool operator==(const Step&) const = default;
};
// "F3", "B0", and with chunks "F3.1" (micro-batch 3, chunk 1).
std::string to_string(const Step& step, bool with_chunk = false);

// For each stage 0..p−1, its steps in execution order: m·V forwards and m·V backwards, each
// (micro-batch, chunk) once each way. GPipe: forwards in micro-batch order, then backwards in
// micro-batch order. 1F1B: w = min(p − s − 1, m) forwards, then pairs "forward w + j, backward
// j" while forwards remain, then the remaining backwards. Interleaved (V >= 2, m a multiple of
// p, p >= 2): Megatron-Core's order over m·V virtual micro-batches: virtual micro-batch j is
// micro-batch (j div pV)·p + (j mod p) on chunk (j mod pV) div p for a forward, on chunk
// V − 1 − that for a backward; w = min(2(p − s − 1) + (V − 1)·p, m·V) warm-up forwards, then
// pairs "forward w + j, backward j", then the remaining backwards. (Older Megatron releases ran
// every forward first when m = p; current ones do not, nor does this.)
// Throws std::invalid_argument for p < 1, m < 1, or an interleaved schedule whose m is not a
// multiple of p or whose p < 2 (check_model_split refuses those with a ValidationError first).
std::vector<std::vector<Step>> stage_orders(int stages, int micro_batches,
                                            const PipelineSchedule& schedule);
// Stage s's order alone (what one rank of the backend runs): stage_orders(...)[s]. Also throws
// std::invalid_argument for a stage outside 0..p−1.
std::vector<Step> stage_order(int stage, int stages, int micro_batches,
                              const PipelineSchedule& schedule);

// The most (micro-batch, chunk) forwards whose backward has not yet run, over the order: the
// activations the stage keeps at its peak, counted in chunk passes (with V = 1, micro-batches;
// with V chunks of equal size, each counts 1/V of the stage's layers).
int peak_in_flight(std::span<const Step> order);
// The same for stage s of stage_orders(stages, micro_batches, schedule). GPipe m; 1F1B
// min(m, p − s); interleaved min(m·V, 2(p − s − 1) + (V − 1)·p + 1), the stage's warm-up plus
// the forward of its first steady step; stage 0 then holds p·V + p − 1 chunk passes, i.e.
// p·(1 + (p − 1)/(p·V)) micro-batches of its layers (the factor of Korthikanti et al., 2022).
int peak_in_flight(int stage, int stages, int micro_batches, const PipelineSchedule& schedule);

// Time of one micro-batch's forward and backward through one (virtual) stage, in seconds.
struct StageTimes {
  double forward = 0;
  double backward = 0;
  // The first micro-batch's forward (of chunk 0 when one entry serves every chunk) ends no
  // earlier than this, from the iteration's start: a stage whose parameters are gathered before
  // their first use computes that forward as its gathers arrive (0: no floor).
  double first_forward_end = 0;
  // Work of one micro-batch's backward that the first `deferred_micro_batches` micro-batches
  // leave to the flush (deferred_wgrad_micro_batches): their backward here takes
  // backward − deferred_wgrad, and the stage runs deferred_micro_batches · deferred_wgrad more
  // after its last step (0: nothing deferred). Only with one entry per virtual stage or V = 1.
  double deferred_wgrad = 0;
  int deferred_micro_batches = 0;
};

// Megatron-Core's deferred output-layer weight gradient (`defer_embedding_wgrad_compute`,
// `wgrad_deferral_limit`; megatron/core/model_parallel_config.py, tensor_parallel/layers.py,
// pipeline_parallel/schedules.py): on the last pipeline stage the output layer's backward
// buffers its input and output gradient instead of running its weight-gradient GEMM while
// fewer than `limit` are buffered (every time with limit 0), and finish_embedding_wgrad_compute
// runs the buffered GEMMs after the stage's last backward, before the gradients are reduced.
// The last virtual stage's backwards run in micro-batch order, so the deferred ones are the
// first min(limit, m) (all m with limit 0); none without the deferral or without a pipeline
// (p = 1: Megatron refuses the flag there, and there is no flush to fill). Throws
// std::invalid_argument for a negative limit.
int deferred_wgrad_micro_batches(bool defer, int limit, int stages, int micro_batches);

struct PipelineTiming {
  double makespan = 0;  // from the first forward's start to the last step's (or flush's) end
  // Per stage: time spent computing, and the rest of the makespan (idle: the bubble).
  std::vector<double> busy;
  std::vector<double> bubble;
  // Per stage: when it is done, its last step's end plus its deferred work (StageTimes).
  std::vector<double> finish;
  // Per stage, per step of its order: when the step started and ended.
  std::vector<std::vector<double>> start;
  std::vector<std::vector<double>> end;

  // Σ bubble / (p · makespan): the fraction of all stages' time spent idle.
  double bubble_fraction() const;
};

// Evaluates the orders of stage_orders exactly: every step starts when its stage has finished
// the previous step of its order and its dependency (above) has finished, plus `p2p` seconds
// when the dependency ran on another stage (the activation or gradient transfer; 0 when both
// virtual stages are on the same stage). `times` holds one entry per stage (each chunk of an
// interleaved stage then takes 1/V of it), or one per virtual stage k = c·p + s (p·V entries).
// A stage with deferred work (StageTimes::deferred_wgrad) runs it after its last step; its finish
// and the makespan include it. Throws std::invalid_argument for another number of entries, a
// negative or non-finite time, a deferred_wgrad above its backward, deferred micro-batches
// outside 0..m or given per stage for an interleaved schedule, or the arguments stage_orders
// refuses.
PipelineTiming pipeline_makespan(int stages, int micro_batches, const PipelineSchedule& schedule,
                                 std::span<const StageTimes> times, double p2p = 0);

// The transfer across the boundary between virtual stages k and k + 1 (an activation forward,
// its gradient backward): its time when it has its links to itself, and the links it holds
// while it moves (say, the NICs of the two nodes it crosses; none: it waits for nothing).
struct Transfer {
  double seconds = 0;
  std::vector<int> links;
  double after = 0;  // then, with its links free again, before it arrives (say, an all-gather)
};
// The same evaluation with one transfer per boundary (p·V − 1 of them, boundary k between
// virtual stages k and k + 1, in both directions): a transfer starts when its step has ended
// and every one of its links is free, and holds them until it arrives, first come, first
// served in time order (ties: in the order the steps ended). With no links and every time p2p
// this is the form above. Throws std::invalid_argument for another number of transfers, a
// negative or non-finite time or a negative link.
PipelineTiming pipeline_makespan(int stages, int micro_batches, const PipelineSchedule& schedule,
                                 std::span<const StageTimes> times,
                                 std::span<const Transfer> transfers);

// One line for people: "1F1B, 4 stages x 8 micro-batches: stage 0 holds 4 in flight, bubble
// 27 %". The bubble is bubble_fraction() with every stage's forward and backward taking the
// same time and no transfer time (for GPipe and 1F1B (p − 1)/(m + p − 1), whatever the
// forward/backward ratio); the second form uses `times` and `p2p` as pipeline_makespan does.
std::string describe(int stages, int micro_batches, const PipelineSchedule& schedule);
std::string describe(int stages, int micro_batches, const PipelineSchedule& schedule,
                     std::span<const StageTimes> times, double p2p = 0);

}  // namespace cephalo::pipeline
