//! The cxx bridge between the C++ glue and Rust, and nothing else: editing this file re-runs
//! the build script, which recompiles every C++ file.

use crate::runtime::allocator::pools::{mem_pool_create, mem_pool_release, mem_pool_retain};
use crate::runtime::allocator::settings::set_allocator_settings;
use crate::runtime::allocator::{
    device_free, device_malloc, device_memory_info, device_stats, empty_cache, memory_report, record_stream,
    reset_accumulated_stats, reset_peak_stats,
};
use crate::runtime::copy::{copy_bytes, host_view};
use crate::runtime::device::{
    check_device, current_device, device_count, exchange_device, set_device, synchronize_device,
};
use crate::error::last_error_kind;
use crate::operators::fallback::record_fallback;
use crate::operators::kernels::attention::launch_attention;
use crate::operators::kernels::conv::launch_convolution;
use crate::operators::kernels::dropout::{launch_dropout, launch_dropout_at};
use crate::operators::kernels::elementwise::{launch_abs_f32, launch_broadcast, launch_pointwise, launch_same_shape};
use crate::operators::kernels::embedding::{embedding_backward, gather_rows, index_select};
use crate::operators::kernels::factory::{launch_arange, launch_fill_int};
use crate::operators::kernels::foreach::launch_foreach;
use crate::operators::kernels::linalg::launch_qr;
use crate::operators::kernels::losses::launch_loss;
use crate::operators::kernels::lstm::launch_lstm_layer;
use crate::operators::kernels::grouped_matmul::launch_grouped_matmul;
use crate::operators::kernels::matmul::launch_matmul;
use crate::operators::kernels::nll_loss::{nll_loss_backward, nll_loss_forward};
use crate::operators::kernels::norm::launch_norm;
use crate::operators::kernels::optim::{launch_amp_unscale, launch_amp_update_scale, launch_fused_step};
use crate::operators::kernels::pooling::launch_pool;
use crate::operators::kernels::nonzero::launch_nonzero;
use crate::operators::kernels::upsample::launch_resize;
use crate::operators::kernels::roi::launch_roi;
use crate::operators::kernels::advanced_indexing::{launch_index, launch_index_write};
use crate::operators::kernels::nms::launch_nms;
use crate::operators::kernels::deform_conv::launch_deform;
use crate::operators::kernels::random::{launch_multinomial, launch_random, launch_randperm};
use crate::operators::kernels::reduce::launch_reduction;
use crate::operators::kernels::rnn::launch_rnn_cell;
use crate::operators::kernels::rows::{launch_arg_extremum, launch_cumsum};
use crate::operators::kernels::softmax::launch_softmax;
use crate::operators::kernels::triangle::launch_triangle;
use crate::operators::kernels::histogram::launch_histc;
use crate::operators::kernels::indexing::launch_index_put;
use crate::operators::kernels::sort::launch_sort;
use crate::runtime::host_allocator::{
    empty_host_cache, host_free, host_malloc, host_stats, is_pinned, pointer_device,
    record_host_event, reset_host_stats,
};
use crate::runtime::generator::{
    PhiloxGenerator, generator_clone, generator_host_seed, generator_reserve, generator_new, generator_offset, generator_seed, generator_set_offset,
    generator_set_seed, generator_share,
};
use crate::runtime::graph::{Graph, graph_capture_begin, graph_capture_end, graph_debug_dump, graph_replay};
use crate::runtime::profiler::{
    trace_mark, trace_pop_correlation, trace_push_correlation, trace_range_pop, trace_range_push,
    trace_start, trace_stop, trace_take_activities,
};
use crate::runtime::stream::{
    Event, current_stream, event_block, event_create, event_device, event_elapsed_time,
    event_query, event_record, event_synchronize, exchange_stream, new_stream, query_stream, stream_is_capturing,
    stream_from_pool, stream_handle, stream_priority, synchronize_stream,
};

// ANCHOR: bridge_head
#[cxx::bridge(namespace = "openreg")]
pub(crate) mod ffi {
    /// Which Python exception a failed call becomes (set by Rust, read by C++).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum ErrorKind {
        Runtime,
        Value,
        Index,
        OutOfMemory,
    }
    // ANCHOR_END: bridge_head

    /// One statistic as PyTorch reports it: current, peak, and the cumulative ins and outs.
    #[derive(Debug, Clone, Copy, Default)]
    struct Stat {
        current: i64,
        peak: i64,
        allocated: i64,
        freed: i64,
    }

    /// `[all, small_pool, large_pool]` for each statistic, like `c10::StatArray`.
    #[derive(Debug, Clone, Copy, Default)]
    struct DeviceStats {
        allocation: [Stat; 3],
        segment: [Stat; 3],
        active: [Stat; 3],
        inactive_split: [Stat; 3],
        allocated_bytes: [Stat; 3],
        reserved_bytes: [Stat; 3],
        active_bytes: [Stat; 3],
        inactive_split_bytes: [Stat; 3],
        requested_bytes: [Stat; 3],
        num_alloc_retries: i64,
        num_ooms: i64,
        num_device_alloc: i64,
        num_device_free: i64,
    }

    /// Pinned host memory statistics, like `at::HostStats`.
    #[derive(Debug, Clone, Copy, Default)]
    struct HostStats {
        active_requests: Stat,
        active_bytes: Stat,
        allocations: Stat,
        allocated_bytes: Stat,
        num_host_alloc: i64,
        num_host_free: i64,
    }

    /// Work that ran on a stream, for the profiler (runtime's `trace::Activity`).
    struct TraceActivity {
        name: &'static str,
        /// 0 kernel, 1 memcpy, 2 event record.
        kind: u8,
        device: i64,
        stream: u64,
        start_ns: u64,
        end_ns: u64,
        correlation: u64,
    }

    /// A block and its device's totals, for the profiler's memory events.
    struct MemoryReport {
        device: i64,
        size: i64,
        allocated: usize,
        reserved: usize,
    }

    struct MemoryInfo {
        free: usize,
        total: usize,
    }

    /// `PYTORCH_ALLOC_CONF` as the device allocator uses it (the hook in csrc/runtime/DeviceAllocator.cpp).
    struct AllocatorSettings {
        max_split_size: usize,
        max_non_split_rounding: usize,
        garbage_collection_threshold: f64,
        large_segment_size: usize,
        /// Divisions per power of two for sizes in [2^k, 2^(k+1)), k = 0..63 (1: none).
        roundup_power2_divisions: Vec<usize>,
        /// Our own key, `openreg_parked_blocks`.
        parked_blocks: usize,
    }

    /// One frame of a symbolized traceback (torch::CapturedTraceback).
    struct SymbolizedFrame {
        traceback: usize,
        name: String,
        filename: String,
        line: i64,
    }

    /// A kernel's Philox numbers: the generator's seed and the offset reserved for it.
    struct PhiloxDraw {
        seed: u64,
        offset: u64,
    }

    /// A random distribution of the Rust kernels (`kernels/random.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum RandomOp {
        Uniform,
        Normal,
        LogNormal,
        Exponential,
        Geometric,
        Cauchy,
        Bernoulli,
        BernoulliTensor,
        Integers,
    }

    /// An elementwise operation of the Rust kernels (`kernels/elementwise.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Pointwise {
        Copy,
        Fill,
        Add,
        Mul,
        Div,
        Maximum,
        Minimum,
        ThresholdBackward,
        Neg,
        Abs,
        Exp,
        Relu,
        Sigmoid,
        Tanh,
        Silu,
        /// `scalar`: 0 for the exact GELU, 1 for the tanh approximation.
        Gelu,
        /// `scalar`: the negative slope.
        LeakyRelu,
        SiluBackward,
        GeluBackward,
        LeakyReluBackward,
        /// `scalar`, `scalar2`: the bounds.
        Hardtanh,
        HardtanhBackward,
        Sqrt,
        Reciprocal,
        Log,
        /// `scalar`: the weight.
        Lerp,
        /// `scalar`: the value.
        Addcmul,
        Addcdiv,
        // The table-driven operators (csrc/operators/PointwiseTable.cpp).
        Eq,
        Ne,
        Lt,
        Le,
        Gt,
        Ge,
        LogicalNot,
        LogicalAnd,
        LogicalOr,
        IsNegInf,
        IsPosInf,
        Where,
        /// `scalar`: the value.
        MaskedFill,
        Sign,
        Rsqrt,
        Erfinv,
        Sin,
        Cos,
        /// `scalar`: the exponent.
        PowScalar,
        /// `scalar`: the bound.
        ClampMin,
        ClampMax,
        Hardswish,
        Hardsigmoid,
        HardswishBackward,
        HardsigmoidBackward,
        SigmoidBackward,
        TanhBackward,
        /// `scalar`, `scalar2`: beta, threshold.
        Softplus,
        SoftplusBackward,
        Log1p,
        /// `scalar`, `scalar2`: the threshold, the value at and below it.
        Threshold,
        /// `scalar`: lambda.
        Hardshrink,
        Softshrink,
        /// hardshrink's and softshrink's gradient; `scalar`: lambda.
        ShrinkBackward,
        Mish,
        /// `scalar`, `scalar2`: the bounds; NaN for an absent one.
        Clamp,
        Xlogy,
        /// `scalar`, `scalar2`: alpha, scale (input_scale 1).
        Elu,
        EluBackward,
        /// elu with scale 1 (CELU); `scalar`, `scalar2`: alpha, input_scale.
        Celu,
        CeluBackward,
        /// Bitwise on integers, logical on bools.
        BitwiseAnd,
        BitwiseOr,
        BitwiseXor,
        BitwiseNot,
        LogSigmoid,
        /// (grad, self).
        LogSigmoidBackward,
        /// Division rounded down, or toward zero (`div(..., rounding_mode=...)`).
        DivFloor,
        DivTrunc,
        /// (self, vec1, vec2): `scalar * self + scalar2 * vec1 * vec2`, self ignored when
        /// `scalar` (beta) is 0.
        Addr,
        /// Rounding (a copy for integers) and the base-2 logarithm.
        Floor,
        Ceil,
        Trunc,
        Log2,
    }

    /// A reduction of the Rust kernels (`kernels/reduce.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Reduction {
        Sum,
        Mean,
        Amax,
        Amin,
    }

    /// How `_grouped_mm`'s offsets cut its operands (`kernels/grouped_matmul.rs`):
    /// `Rows`: `a` (m x k) and `out` (m x n) by rows, `b` one k x n matrix per group;
    /// `Columns`: `b` (k x n) and `out` by columns, `a` one m x k matrix per group;
    /// `Depth`: `a` by columns and `b` by rows, `out` one m x n matrix per group.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Grouping {
        Rows,
        Columns,
        Depth,
    }

    /// A softmax-family kernel (`kernels/softmax.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Softmax {
        Softmax,
        LogSoftmax,
        SoftmaxBackward,
        LogSoftmaxBackward,
    }

    /// A pass of the convolution kernel (`kernels/conv.rs`), named as for a convolution that
    /// is not transposed; a transposed convolution's forward is `BackwardInput`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Conv {
        /// output = weight ⊛ input + bias
        Forward,
        /// input = the gradient reaching the input from `output`
        BackwardInput,
        /// weight = the gradient reaching the weight from `output`, given `input`
        BackwardWeight,
    }

    /// A convolution's shape in the terms of one that is not transposed (1-D and 2-D ones have
    /// leading spatial dimensions of size 1).
    #[derive(Debug, Clone, Copy)]
    struct ConvShape {
        batch: i64,
        groups: i64,
        in_channels: i64,
        out_channels: i64,
        input: [i64; 3],
        output: [i64; 3],
        kernel: [i64; 3],
        stride: [i64; 3],
        padding: [i64; 3],
        dilation: [i64; 3],
    }

    /// A whole LSTM layer's sizes, one direction (`kernels/lstm.rs`).
    #[derive(Debug, Clone, Copy)]
    struct LstmShape {
        time: i64,
        batch: i64,
        input: i64,
        hidden: i64,
        reverse: bool,
    }

    /// A fused recurrent cell, forward or backward (`kernels/rnn.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Cell {
        LstmForward,
        LstmBackward,
        GruForward,
        GruBackward,
    }

    /// A normalization kernel (`kernels/norm.rs`); layer norm is group norm of one group.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Norm {
        GroupNorm,
        GroupNormBackward,
        BatchNorm,
        BatchNormBackward,
    }

    /// A normalization's operands are `batch` samples of `channels` channels of `inner`
    /// contiguous elements; `momentum` and `training` are batch norm's.
    #[derive(Debug, Clone, Copy)]
    struct NormShape {
        batch: i64,
        channels: i64,
        inner: i64,
        groups: i64,
        eps: f64,
        momentum: f64,
        training: bool,
    }

    /// A 2-D or 3-D pooling kernel (`kernels/pooling.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Pool {
        MaxForward,
        MaxBackward,
        AvgForward,
        AvgBackward,
        AdaptiveAvgForward,
        AdaptiveAvgBackward,
        AdaptiveMaxForward,
        AdaptiveMaxBackward,
    }

    /// `planes` contiguous [depth, height, width] volumes in and out (2-D pooling: depth 1),
    /// and the window's parameters (`divisor`: avg_pool's divisor_override, 0 for none; it may
    /// be negative).
    #[derive(Debug, Clone, Copy)]
    struct PoolShape {
        planes: i64,
        input: [i64; 3],
        output: [i64; 3],
        kernel: [i64; 3],
        stride: [i64; 3],
        padding: [i64; 3],
        dilation: [i64; 3],
        count_include_pad: bool,
        divisor: i64,
    }

    /// A 2-D resize (`kernels/upsample.rs`): interpolate's "nearest", "nearest-exact" and
    /// "bilinear" modes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Resize {
        Nearest,
        NearestExact,
        Bilinear,
    }

    /// `planes` contiguous [height, width] planes of `input` size resized to `output` size;
    /// `scales`: the factors the caller gave (`scales_h`, `scales_w`), 0 when absent.
    /// Backward: the output-sized gradient in, the input-sized gradient out.
    #[derive(Debug, Clone, Copy)]
    struct ResizeShape {
        planes: i64,
        input: [i64; 2],
        output: [i64; 2],
        scales: [f64; 2],
        align_corners: bool,
        backward: bool,
    }

    /// Advanced indexing's layout (`kernels/advanced_indexing.rs`): per result dimension its
    /// size and strides in the source and in the broadcast index tensors; per index tensor the
    /// source dimension it indexes, that dimension's size and stride.
    #[derive(Debug, Clone)]
    struct IndexLayout {
        shape: Vec<i64>,
        source_strides: Vec<i64>,
        index_strides: Vec<i64>,
        dims: Vec<i64>,
        dim_sizes: Vec<i64>,
        dim_strides: Vec<i64>,
    }

    /// What a write through advanced indexing does (`kernels/advanced_indexing.rs`):
    /// `x[idx] = v`, `x[idx] += v` (index_put_ with accumulate), or index_add_ (the same sum,
    /// with index_add_'s error message).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum IndexWrite {
        Assign,
        Accumulate,
        IndexAdd,
    }

    /// torchvision's region-of-interest operators (`kernels/roi.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum RoiOp {
        Align,
        Pool,
        PsAlign,
        PsPool,
    }

    /// `rois` boxes over a `[batch, channels, height, width]` map, each pooled into
    /// `pooled` (height, width) bins.
    #[derive(Debug, Clone, Copy)]
    struct RoiShape {
        rois: i64,
        batch: i64,
        channels: i64,
        height: i64,
        width: i64,
        pooled: [i64; 2],
        spatial_scale: f64,
        sampling_ratio: i64,
        aligned: bool,
    }

    /// A pass of torchvision's deformable convolution (`kernels/deform_conv.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum DeformPass {
        Im2col,
        Col2im,
        Col2imCoord,
    }

    /// A deformable convolution's sizes: input `[batch, channels, height, width]`, a
    /// `kernel` (height, width) of taps, `offset_groups` groups of channels sharing offsets,
    /// output positions `out` (height, width).
    #[derive(Debug, Clone, Copy)]
    struct DeformShape {
        batch: i64,
        channels: i64,
        height: i64,
        width: i64,
        kernel: [i64; 2],
        stride: [i64; 2],
        padding: [i64; 2],
        dilation: [i64; 2],
        offset_groups: i64,
        out: [i64; 2],
        use_mask: bool,
    }

    /// Scaled dot-product attention (`kernels/attention.rs`) over `[batch, heads, rows, dim]`
    /// operands; `kv_heads` divides `heads` (grouped-query attention). The inputs q, k, v,
    /// grad_out and out are read at `input_strides` (batch, head and row strides, five
    /// operands in that order; rows are contiguous), the outputs (out, or dq, dk and dv) are
    /// written at `output_strides` (likewise, rows contiguous). The mask, if
    /// any, is read at `mask_strides` (0 along broadcast dimensions) over [batch, heads,
    /// query_len, key_len].
    #[derive(Debug, Clone, Copy)]
    struct AttentionShape {
        batch: i64,
        heads: i64,
        kv_heads: i64,
        query_len: i64,
        key_len: i64,
        head_dim: i64,
        value_dim: i64,
        scale: f64,
        causal: bool,
        input_strides: [i64; 15],
        output_strides: [i64; 9],
        mask_strides: [i64; 4],
    }

    /// A loss computed row by row on the host thread after the stream drains, like the NLL
    /// loss (`kernels/margin.rs`, `kernels/ctc.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Loss {
        /// output | input, target, weight (address 0: none)
        MultiMargin,
        /// grad_input | grad_output, input, target, weight
        MultiMarginBackward,
        /// output, is_target | input, target
        MultilabelMargin,
        /// grad_input | grad_output, input, target, is_target
        MultilabelMarginBackward,
        /// neg_log_likelihood, log_alpha | log_probs, targets
        Ctc,
        /// grad | grad_out, log_probs, targets, neg_log_likelihood, log_alpha
        CtcBackward,
    }

    /// A loss's sizes and arguments; `reduction` as `at::Reduction`. CTC: `batch` sequences of
    /// at most `time` steps over `classes` symbols, targets padded to `max_target` per sequence
    /// (`targets_2d`) or concatenated.
    #[derive(Debug, Clone, Copy)]
    struct LossArgs {
        batch: i64,
        classes: i64,
        reduction: i64,
        p: i64,
        margin: f64,
        time: i64,
        max_target: i64,
        blank: i64,
        targets_2d: bool,
        zero_infinity: bool,
    }

    /// A fused optimizer step (`kernels/optim.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fused {
        Adam,
        AdamW,
        Sgd,
    }

    /// The hyperparameters of a fused step (each optimizer reads its own).
    #[derive(Debug, Clone, Copy)]
    struct FusedArgs {
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        momentum: f64,
        dampening: f64,
        amsgrad: bool,
        maximize: bool,
        nesterov: bool,
        first_step: bool,
    }

    /// The arguments of `nll_loss_forward`/`backward`: `reduction` as `at::Reduction`, and
    /// whether the result is per sample (reduction none with a batch dimension).
    #[derive(Debug, Clone, Copy)]
    struct NllLoss {
        reduction: i64,
        ignore_index: i64,
        classes: i64,
        per_sample: bool,
    }

    // ANCHOR: dense
    /// A contiguous tensor in device memory: address, its storage (address, bytes), element
    /// count and `c10::ScalarType` code. An absent optional tensor has address 0.
    #[derive(Debug, Clone, Copy)]
    struct Dense {
        data: usize,
        storage: usize,
        storage_len: usize,
        numel: usize,
        dtype: i8,
    }
    // ANCHOR_END: dense

    /// A (batch of) matrices in device memory: address and strides in elements, and the
    /// storage (address, bytes) that holds it.
    #[derive(Debug, Clone, Copy)]
    struct Matrix {
        data: usize,
        storage: usize,
        storage_len: usize,
        batch_stride: i64,
        row_stride: i64,
        col_stride: i64,
    }

    // ANCHOR: extern_rust
    extern "Rust" {
        fn last_error_kind() -> ErrorKind;

        // Devices.
        fn device_count() -> i8;
        fn check_device(index: i64) -> Result<i8>;
        fn current_device() -> i8;
        fn set_device(index: i64) -> Result<()>;
        fn exchange_device(index: i64) -> Result<i8>;
        fn synchronize_device(index: i64) -> Result<()>;
        // ANCHOR_END: extern_rust

        // Device memory (a caching allocator), with the statistics PyTorch reports.
        fn device_malloc(device: i64, size: usize) -> Result<usize>;
        fn device_free(ptr: usize);
        fn memory_report(ptr: usize) -> MemoryReport;
        fn device_stats(device: i64) -> Result<DeviceStats>;
        fn reset_peak_stats(device: i64) -> Result<()>;
        fn reset_accumulated_stats(device: i64) -> Result<()>;
        fn device_memory_info(device: i64) -> Result<MemoryInfo>;
        fn empty_cache();
        fn record_stream(ptr: usize, device: i64, stream: i64) -> Result<()>;
        fn set_allocator_settings(settings: AllocatorSettings) -> Result<()>;
        // Memory pools; a graph's capture holds a reference to its pool.
        fn mem_pool_create(device: i64) -> Result<u64>;
        fn mem_pool_retain(pool: u64) -> Result<()>;
        fn mem_pool_release(pool: u64);

        // Pinned host memory (a caching allocator) and pointer queries.
        fn host_malloc(size: usize) -> Result<usize>;
        fn host_free(ptr: usize);
        fn record_host_event(ptr: usize, device: i64, stream: i64) -> Result<bool>;
        fn empty_host_cache();
        fn host_stats() -> HostStats;
        fn reset_host_stats(peak_only: bool);
        fn is_pinned(ptr: usize) -> bool;
        fn pointer_device(ptr: usize) -> i8;

        // Copies, and the runtime's view of device memory.
        fn copy_bytes(dst: usize, src: usize, len: usize, non_blocking: bool) -> Result<()>;
        fn host_view(ptr: usize, len: usize) -> Result<usize>;

        // Kernels, queued on the device's current stream.
        fn launch_abs_f32(dst: usize, src: usize, n: usize, device: i64) -> Result<()>;
        /// Counts a CPU run of an operator; true the first time.
        fn record_fallback(name: &str) -> bool;
        fn launch_pointwise(
            op: Pointwise,
            scalar: f64,
            scalar2: f64,
            data: &[usize],
            storages: &[usize],
            dtypes: &[i8],
            constants: &[f64],
            shape: &[i64],
            strides: &[i64],
            device: i64,
        ) -> Result<bool>;
        fn launch_same_shape(op: Pointwise, scalar: f64, out: Dense, a: Dense, b: Dense, device: i64) -> Result<bool>;
        fn launch_broadcast(
            op: Pointwise,
            scalar: f64,
            out: Dense,
            full: Dense,
            part: Dense,
            part_first: bool,
            inner: usize,
            device: i64,
        ) -> Result<bool>;
        fn launch_reduction(
            op: Reduction,
            count: f64,
            data: &[usize],
            storages: &[usize],
            dtypes: &[i8],
            shape: &[i64],
            strides: &[i64],
            device: i64,
        ) -> Result<()>;
        fn launch_matmul(
            dtype: i8,
            batch: i64,
            m: i64,
            n: i64,
            k: i64,
            out: Matrix,
            a: Matrix,
            b: Matrix,
            alpha: f64,
            beta: f64,
            device: i64,
        ) -> Result<()>;
        fn launch_grouped_matmul(
            dtype: i8,
            grouping: Grouping,
            m: i64,
            n: i64,
            k: i64,
            out: Matrix,
            a: Matrix,
            b: Matrix,
            offsets: Dense,
            device: i64,
        ) -> Result<()>;

        /// `lse`: absent (address 0), or softmax's `[outer, inner]` log-sum-exp (float32) to write.
        fn launch_softmax(
            op: Softmax,
            out: Dense,
            inputs: &[Dense],
            lse: Dense,
            outer: i64,
            size: i64,
            inner: i64,
            device: i64,
        ) -> Result<bool>;
        /// Contiguous float32 operands; `op` says which one is written.
        fn launch_convolution(
            op: Conv,
            shape: ConvShape,
            input: Dense,
            output: Dense,
            weight: Dense,
            bias: Dense,
            device: i64,
        ) -> Result<()>;
        /// `operands` in the order of `kernels/rnn.rs`'s `layout`; false if a dtype is not ours.
        fn launch_rnn_cell(op: Cell, operands: &[Dense], batch: i64, hidden: i64, device: i64) -> Result<bool>;
        /// Contiguous float32 `operands` in `kernels/lstm.rs`'s order (an absent input: address 0).
        fn launch_lstm_layer(backward: bool, shape: LstmShape, operands: &[Dense], device: i64) -> Result<()>;
        /// Contiguous operands, `mask` bool; false if a dtype is not ours (`kernels/dropout.rs`).
        #[allow(clippy::too_many_arguments)]
        fn launch_dropout(
            backward: bool,
            generator: &PhiloxGenerator,
            keep: f64,
            scale: f64,
            out: Dense,
            input: Dense,
            mask: Dense,
            device: i64,
        ) -> Result<bool>;
        /// Dropout's forward with given Philox numbers (fused attention's, kept for its backward).
        #[allow(clippy::too_many_arguments)]
        fn launch_dropout_at(
            seed: u64,
            offset: u64,
            keep: f64,
            scale: f64,
            out: Dense,
            input: Dense,
            mask: Dense,
            device: i64,
        ) -> Result<bool>;
        /// A random operator over contiguous `out`; false if the dtype is not ours (`kernels/random.rs`).
        #[allow(clippy::too_many_arguments)]
        fn launch_random(
            op: RandomOp,
            a: f64,
            b: f64,
            from: i64,
            range: u64,
            out: Dense,
            p: Dense,
            generator: &PhiloxGenerator,
            device: i64,
        ) -> Result<bool>;
        fn launch_randperm(out: Dense, generator: &PhiloxGenerator, device: i64) -> Result<bool>;
        /// `index_put_` at element offsets (`csrc/operators/Indexing.cpp`); false if the dtype is not ours.
        fn launch_index_put(target: Dense, offsets: &[i64], values: Dense, accumulate: bool, device: i64) -> Result<bool>;
        /// `arange` and an integer `fill_` of a contiguous tensor (`kernels/factory.rs`); false
        /// if the dtype is not one they write.
        fn launch_arange(out: Dense, start: f64, step: f64, istart: i64, istep: i64, device: i64) -> Result<bool>;
        fn launch_fill_int(out: Dense, value: i64, device: i64) -> Result<bool>;
        /// Along the last dimension of `rows` contiguous rows of `len` elements
        /// (`kernels/rows.rs`): the index of each row's largest (`max`) or smallest element into
        /// `out` (int64), and the running sum into `out` (the input's dtype). False if the dtype
        /// is not one they read.
        fn launch_arg_extremum(max: bool, rows: i64, len: i64, input: Dense, out: Dense, device: i64) -> Result<bool>;
        fn launch_cumsum(rows: i64, len: i64, input: Dense, out: Dense, device: i64) -> Result<bool>;
        /// A stable sort of contiguous rows keeping the first `keep` of each, with indices
        /// (`kernels/sort.rs`: sort, topk).
        #[allow(clippy::too_many_arguments)]
        fn launch_sort(rows: i64, len: i64, keep: i64, input: Dense, values: Dense, indices: Dense, descending: bool,
                       device: i64) -> Result<bool>;
        /// `histc` of a contiguous tensor over `[min, max]` (`kernels/histogram.rs`).
        fn launch_histc(input: Dense, out: Dense, bins: i64, min: f64, max: f64, device: i64) -> Result<bool>;
        /// `tril`/`triu` of contiguous matrices (`kernels/triangle.rs`).
        #[allow(clippy::too_many_arguments)]
        fn launch_triangle(input: Dense, out: Dense, rows: i64, cols: i64, diagonal: i64, upper: bool, device: i64) -> Result<bool>;
        /// QR of contiguous matrices (`kernels/linalg.rs`); false if the dtype is not ours.
        #[allow(clippy::too_many_arguments)]
        fn launch_qr(a: Dense, q: Dense, r: Dense, batch: i64, m: i64, n: i64, complete: bool, device: i64) -> Result<bool>;
        #[allow(clippy::too_many_arguments)]
        fn launch_multinomial(
            weights: Dense,
            rows: i64,
            categories: i64,
            samples: i64,
            replacement: bool,
            out: Dense,
            generator: &PhiloxGenerator,
            device: i64,
        ) -> Result<()>;
        /// `operands` in `kernels/norm.rs`'s order; false if a dtype is not ours.
        fn launch_norm(op: Norm, shape: NormShape, operands: &[Dense], device: i64) -> Result<bool>;
        /// `operands` in `kernels/pooling.rs`'s order; false if a dtype is not ours.
        fn launch_pool(op: Pool, shape: PoolShape, operands: &[Dense], device: i64) -> Result<bool>;
        /// `out` (backward: the input-sized gradient) from `input`; false if a dtype is not ours.
        fn launch_resize(mode: Resize, shape: ResizeShape, out: Dense, input: Dense, device: i64) -> Result<bool>;
        /// `out = source[indices...]`, the index values read on the stream.
        fn launch_index(source: Dense, out: Dense, item: usize, layout: &IndexLayout, indices: &[Dense], device: i64) -> Result<()>;
        /// `target[indices...] = values` (or `+=`), the index values read on the stream; false
        /// if the dtype has no arithmetic here.
        fn launch_index_write(op: IndexWrite, target: Dense, values: Dense, item: usize, layout: &IndexLayout, indices: &[Dense], device: i64) -> Result<bool>;
        /// torchvision's roi operators: forward (output, mapping | input, boxes) or backward
        /// (grad_input | mapping, grad, boxes); false if a dtype is not ours.
        fn launch_roi(op: RoiOp, backward: bool, shape: RoiShape, operands: &[Dense], device: i64) -> Result<bool>;
        /// Non-maximum suppression of float32 `boxes` taken in `order`: the kept indices into
        /// `keep` and their number into `count`; false if a dtype is not ours.
        fn launch_nms(boxes: Dense, order: Dense, keep: Dense, count: Dense, iou_threshold: f64, device: i64) -> Result<bool>;
        /// A sampling pass of deformable convolution; false if a dtype is not ours.
        fn launch_deform(pass: DeformPass, shape: DeformShape, operands: &[Dense], device: i64) -> Result<bool>;
        /// The coordinates of a contiguous bool `mask` of `sizes`'s `count` true elements, into
        /// a contiguous int64 `[count, sizes.len()]` `out`.
        fn launch_nonzero(mask: Dense, sizes: &[i64], out: Dense, count: i64, device: i64) -> Result<()>;
        /// Attention's forward (operands: out, lse | q, k, v) or backward (dq, dk, dv | grad_out,
        /// q, k, v, out, lse); `mask` absent (address 0), boolean or additive. False: not ours.
        fn launch_attention(backward: bool, shape: AttentionShape, operands: &[Dense], mask: Dense, device: i64) -> Result<bool>;
        /// `operands` in `Loss`'s order; `lengths`: CTC's input lengths then target lengths.
        /// False if a dtype is not ours.
        fn launch_loss(op: Loss, args: LossArgs, operands: &[Dense], lengths: &[i64], device: i64) -> Result<bool>;
        /// One launch over `tensors` lists of operands, `[out, inputs..]` per tensor; an input with
        /// address 0 is `constants[same index]`; `scalars`: two per tensor. False: not ours.
        fn launch_foreach(
            op: Pointwise,
            operands: &[Dense],
            constants: &[f64],
            scalars: &[f64],
            tensors: usize,
            device: i64,
        ) -> Result<bool>;
        /// `operands`: per parameter, in `kernels/optim.rs`'s `per_param` order.
        fn launch_fused_step(
            kind: Fused,
            args: FusedArgs,
            operands: &[Dense],
            grad_scale: Dense,
            found_inf: Dense,
            device: i64,
        ) -> Result<bool>;
        fn launch_amp_unscale(grads: &[Dense], found_inf: Dense, inv_scale: Dense, device: i64) -> Result<bool>;
        fn launch_amp_update_scale(
            scale: Dense,
            growth_tracker: Dense,
            found_inf: Dense,
            growth: f64,
            backoff: f64,
            interval: i64,
            device: i64,
        ) -> Result<bool>;
        /// Rows of `inner` elements of `item` bytes (whatever the dtype) at host offsets the
        /// caller computed and checked against `size` (gathers, padding).
        fn gather_rows(
            src: Dense,
            dst: Dense,
            item: usize,
            indices: &[i64],
            outer: usize,
            size: usize,
            inner: usize,
            device: i64,
        ) -> Result<()>;
        /// `index_select`: the same gather, its int64 `indices` on the device, read and checked
        /// against `size` on the stream.
        fn index_select(
            src: Dense,
            dst: Dense,
            item: usize,
            indices: Dense,
            outer: usize,
            size: usize,
            inner: usize,
            device: i64,
        ) -> Result<()>;
        fn embedding_backward(
            grad_weight: Dense,
            grad_output: Dense,
            indices: Dense,
            dim: usize,
            padding_idx: i64,
            scale_by_freq: bool,
            device: i64,
        ) -> Result<bool>;
        /// The NLL loss reads and checks its class indices on the stream (see operators/kernels/nll_loss.rs).
        fn nll_loss_forward(
            args: NllLoss,
            output: Dense,
            total_weight: Dense,
            input: Dense,
            target: Dense,
            weight: Dense,
            device: i64,
        ) -> Result<bool>;
        fn nll_loss_backward(
            args: NllLoss,
            grad_input: Dense,
            grad_output: Dense,
            target: Dense,
            weight: Dense,
            total_weight: Dense,
            device: i64,
        ) -> Result<bool>;

        // Streams, named by (device, id) as in c10::Stream.
        fn current_stream(device: i64) -> Result<i64>;
        fn exchange_stream(device: i64, id: i64) -> Result<i64>;
        fn new_stream(device: i64, priority: i32) -> Result<i64>;
        fn stream_from_pool(device: i64, high_priority: bool) -> Result<i64>;
        fn stream_handle(device: i64, id: i64) -> Result<usize>;
        fn stream_priority(device: i64, id: i64) -> Result<i32>;
        fn query_stream(device: i64, id: i64) -> Result<bool>;
        fn stream_is_capturing(device: i64, id: i64) -> Result<bool>;
        fn synchronize_stream(device: i64, id: i64) -> Result<()>;

        // Events; C++ keeps them as the `void*` PyTorch hands around.
        type Event;
        fn event_create(timing: bool) -> Box<Event>;
        fn event_record(event: &Event, device: i64, stream: i64) -> Result<()>;
        fn event_block(event: &Event, device: i64, stream: i64) -> Result<()>;
        fn event_query(event: &Event) -> bool;
        fn event_synchronize(event: &Event) -> Result<()>;
        fn event_device(event: &Event) -> i8;
        fn event_elapsed_time(start: &Event, end: &Event) -> Result<f64>;

        // Profiler annotations (runtime/profiler.rs): names arrive as bytes, any encoding.
        fn trace_range_push(name: &[u8]);
        fn trace_range_pop();
        fn trace_mark(name: &[u8]);
        // A generator's seed and Philox offset (runtime/generator.rs, csrc/runtime/Generator.cpp).
        type PhiloxGenerator;
        fn generator_new(seed: u64) -> Box<PhiloxGenerator>;
        fn generator_clone(generator: &PhiloxGenerator) -> Box<PhiloxGenerator>;
        fn generator_share(generator: &PhiloxGenerator) -> Box<PhiloxGenerator>;
        fn generator_seed(generator: &PhiloxGenerator) -> u64;
        fn generator_set_seed(generator: &PhiloxGenerator, seed: u64);
        fn generator_offset(generator: &PhiloxGenerator) -> u64;
        fn generator_set_offset(generator: &PhiloxGenerator, offset: u64) -> Result<()>;
        fn generator_reserve(generator: &PhiloxGenerator, increment: u64, device: i64) -> Result<PhiloxDraw>;
        fn generator_host_seed(generator: &PhiloxGenerator, device: i64) -> Result<u64>;
        // Graphs (runtime/graph.rs, csrc/runtime/Graph.cpp).
        type Graph;
        fn graph_capture_begin(device: i64, stream: i64, pool: u64, mode: u8) -> Result<u64>;
        fn graph_capture_end(device: i64, stream: i64) -> Result<Box<Graph>>;
        fn graph_replay(graph: &Graph) -> Result<()>;
        fn graph_debug_dump(graph: &Graph, path: &str) -> Result<()>;

        // A Kineto session (csrc/runtime/ActivityProfiler.cpp).
        fn trace_start();
        fn trace_stop();
        fn trace_push_correlation(id: u64);
        fn trace_pop_correlation();
        fn trace_take_activities() -> Vec<TraceActivity>;
    }

    // ANCHOR: extern_cpp
    unsafe extern "C++" {
        include!("Register.h");
        /// Registers allocator, guard, hooks, operators and fallback with PyTorch. Idempotent.
        fn register_backend() -> Result<()>;
        /// `at::globalContext().lazyInitDevice(PrivateUse1)`: calls the hooks' `init` once.
        fn lazy_init_device() -> Result<()>;
    }
    // ANCHOR_END: extern_cpp

    // ANCHOR: extern_traceback
    unsafe extern "C++" {
        include!("runtime/MemoryHistory.h");
        /// Where an allocation came from: torch::CapturedTraceback, symbolized only when a
        /// snapshot is taken.
        type Traceback;
        /// Python frames (and C++ frames if `cpp`) of the calling thread.
        fn gather_traceback(python: bool, cpp: bool) -> SharedPtr<Traceback>;
        /// Symbolizes many tracebacks in one pass (C++ frames share one symbol lookup).
        type Symbolizer;
        fn new_symbolizer() -> UniquePtr<Symbolizer>;
        fn add(self: Pin<&mut Symbolizer>, traceback: &SharedPtr<Traceback>) -> usize;
        fn symbolize(self: Pin<&mut Symbolizer>) -> Vec<SymbolizedFrame>;
    }
    // ANCHOR_END: extern_traceback
}
