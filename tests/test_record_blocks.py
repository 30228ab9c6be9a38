"""Issue #48 item 4: the record's blocks the package builds (model, runtime, plugin, input, device)
are typed (core/record_blocks.py). Each record below is what the code before the change wrote (a
real run's report at 9a21be5, kept as a literal): read back with Record.from_json it holds typed
blocks and writes again byte for byte; a block of an older or edited report still reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_edge import codec
from pytest_edge.core.record import Record, artifact_identity, model_json
from pytest_edge.core.record_accuracy import DecoderAccuracy, SpeechAccuracy, TensorAccuracy
from pytest_edge.core.record_blocks import (AudioInput, DeviceRun, InputTensor, ModelIdentity, PluginIdentity,
                                            RuntimeIdentity, read_input)
from pytest_edge.measurement.machine import Machine

# Records of real runs' reports at 9a21be5 (before the blocks were typed), json.dumps of each: a tensor
# model measured and gated against a stored report (onnxruntime and LiteRT), one of two inputs, a
# skipped one, one errored before its marker resolved, a compiled Ethos-U target, a decoder, a speech
# export, one on a device (--edge-device) of an artifact with external data, and one whose input
# shape came from the marker (ncnn, a two-file artifact).
RECORDS: dict[str, str] = {
    'tensor_measured_gated': (
        '{"test": "examples/test_models.py::test_tiny_cnn[tiny_cnn-onnxruntime-cpu]", "model": {"name": "tiny'
        '_cnn", "artifact": "fixtures/tiny_cnn.onnx", "sha256": "3fa6effa9dc38bdfa2fe441d4f17e6733dbe92746138'
        '8dd0a903ea59ed9f99ed"}, "backend": "onnxruntime-cpu", "verdict": "passed", "violations": [], "runtim'
        'e": {"name": "onnxruntime", "version": "1.32.0", "delegates": ["CPUExecutionProvider"], "package": {'
        '"bytes": 80198301, "files": 631, "native_bytes": 71450744}}, "plugin": {"name": "pytest-edge", "vers'
        'ion": "0.1.0"}, "precision": "float32", "threads": 1, "input": {"x": {"shape": [1, 3, 32, 32], "dtyp'
        'e": "float32"}}, "warmup_runs": 1, "measured_runs": 190, "coverage": {"total_ops": 8, "delegated_ops'
        '": 8, "fallback_ops": 0, "partitions": 1, "fallback_op_names": {}, "delegates": ["CPUExecutionProvid'
        'er"], "method": "runtime", "approximate": false, "delegated_op_ids": [], "fallback_reasons": {}, "fa'
        'llback": 0.0}, "load_ms": 3.948017, "first_inference_ms": 0.386152, "latency_ms": {"p50": 0.045953, '
        '"p90": 0.0523199, "p99": 0.0849426099999997, "mean": 0.04781502631578947, "min": 0.044426}, "latency'
        '_quantiles_ms": [0.044426, 0.044738, 0.044797, 0.044843, 0.044906, 0.044936, 0.044954, 0.045021, 0.0'
        '45055, 0.045146, 0.045183, 0.045215, 0.045237, 0.045277, 0.045282, 0.045334, 0.04535, 0.045357, 0.04'
        '5367, 0.045368, 0.045385, 0.045401, 0.045433, 0.045452, 0.045477, 0.045491, 0.045501, 0.045518, 0.04'
        '5547, 0.045565, 0.045574, 0.045584, 0.045597, 0.045602, 0.04562, 0.045651, 0.045668, 0.045677, 0.045'
        '694, 0.045732, 0.045764, 0.045798, 0.045822, 0.045831, 0.045838, 0.045849, 0.045858, 0.045896, 0.045'
        '905, 0.045936, 0.045953, 0.045976, 0.046006, 0.046029, 0.046088, 0.046108, 0.046144, 0.046165, 0.046'
        '174, 0.046184, 0.046198, 0.046208, 0.046221, 0.04623, 0.046277, 0.046279, 0.046332, 0.046359, 0.0463'
        '69, 0.046387, 0.046468, 0.046501, 0.046523, 0.046569, 0.046618, 0.046627, 0.046655, 0.046706, 0.0467'
        '82, 0.046835, 0.046889, 0.047169, 0.047508, 0.047565, 0.048339, 0.049673, 0.050717, 0.051208, 0.0512'
        '81, 0.051724, 0.05232, 0.052378, 0.052505, 0.052764, 0.053288, 0.054191, 0.05475, 0.057063, 0.064523'
        ', 0.084943, 0.103633], "peak_memory_mb": 12.6171875, "steady_memory_mb": 12.6171875, "memory_growth_'
        'kb_per_run": 0.09938271604938272, "memory_growth_mb_per_min": 111.09688931466603, "drift": null, "ti'
        'ming_under_load": null, "other_cores_busy": null, "processes": [{"p50": 0.045953, "p99": 0.084942609'
        '9999997, "min": 0.044426, "runs": 190, "load_ms": 3.948017, "peak_memory_mb": 12.6171875, "other_cor'
        'es_busy": null, "probe_us": 79.298, "drift": null, "probe_drift": null, "start": "spawned", "memory_'
        'growth_kb_per_run": 0.09938271604938272, "rss_points": [[0, 62.69140625], [1, 62.69140625], [2, 62.6'
        '9140625], [3, 62.69140625], [4, 62.69140625], [5, 62.69140625], [19, 62.69140625], [33, 62.69140625]'
        ', [47, 62.6953125], [61, 62.69921875], [75, 62.69921875], [88, 62.703125], [94, 62.70703125], [99, 6'
        '2.70703125], [113, 62.70703125], [127, 62.70703125], [141, 62.70703125], [154, 62.70703125], [167, 6'
        '2.70703125], [181, 62.70703125], [190, 62.70703125]]}], "process_spread": null, "accuracy": {"refere'
        'nce": "onnxruntime-cpu", "cases": 1, "max_abs_err": 0.0, "max_rel_err": 0.0, "cosine": 0.99999999999'
        '99999, "snr_db": 200.0}, "artifact_bytes": 4065, "runtime_bytes": 80198301, "throughput": 20913.9276'
        '3010527, "power_and_temperature": {"tool": "linux-sysfs", "initial": null, "steady": null, "reason":'
        ' "no readable thermal zones in /sys/class/thermal; no CPU frequency in /sys/devices/system/cpu/cpu*/'
        'cpufreq/scaling_cur_freq; no power readings: neither a readable RAPL energy_uj in /sys/class/powerca'
        'p nor power_now in /sys/class/power_supply"}, "baseline_check": {"mode": "stored", "baseline": "exam'
        'ples/test_models.py::test_tiny_cnn[tiny_cnn-onnxruntime-cpu]", "remeasured": false, "compared": ["P5'
        '0 latency", "P99 latency", "peak memory", "artifact size", "delegate coverage", "delegate partitions'
        '"], "verdict": "passed", "folder": "/tmp/cap/r1.json", "inconclusive": [], "notes": ["onnxruntime-cp'
        'u: P99 not gated: 187 runs per process, 1000 needed"], "findings": []}}'
    ),
    'tensor_two_inputs_litert': (
        '{"test": "examples/test_models.py::test_tiny_cnn_int8[tiny_cnn_int8-litert]", "model": {"name": "tin'
        'y_cnn_int8", "artifact": "fixtures/tiny_cnn_int8.tflite", "sha256": "3770257d1f9857d8ee61cb3eb3a97e3'
        '4b6c9de9e12d85cc4d680e5d68f04e260"}, "backend": "litert", "verdict": "passed", "violations": [], "ru'
        'ntime": {"name": "ai-edge-litert", "version": "2.3.0", "delegates": ["XNNPACK"], "package": {"bytes"'
        ': 61385856, "files": 177, "native_bytes": 49939112}}, "plugin": {"name": "pytest-edge", "version": "'
        '0.1.0"}, "precision": "int8", "threads": 1, "input": {"x": {"shape": [1, 3, 32, 32], "dtype": "float'
        '32"}}, "warmup_runs": 1, "measured_runs": 433, "coverage": {"total_ops": 8, "delegated_ops": 7, "fal'
        'lback_ops": 1, "partitions": 1, "fallback_op_names": {"CUMSUM": 1}, "delegates": ["XNNPACK"], "metho'
        'd": "runtime", "approximate": false, "delegated_op_ids": ["QUANTIZE tfl.quantize", "TRANSPOSE transp'
        'ose", "CONV_2D Relu;add;Conv2D;add/y1", "CONV_2D Relu_1;add_1;Conv2D_1;add_1/y1", "MEAN Mean", "FULL'
        'Y_CONNECTED MatMul;add_2", "DEQUANTIZE tfl.dequantize"], "fallback_reasons": {"CUMSUM Identity": ""}'
        ', "fallback": 0.125}, "load_ms": 1.366674, "first_inference_ms": 0.090754, "latency_ms": {"p50": 0.0'
        '20331, "p90": 0.020741, "p99": 0.025645200000000003, "mean": 0.020780217090069285, "min": 0.019669},'
        ' "latency_quantiles_ms": [0.019669, 0.019742, 0.019769, 0.019808, 0.019835, 0.01986, 0.01987, 0.0199'
        '19, 0.019956, 0.020113, 0.020169, 0.0202, 0.02021, 0.02022, 0.02023, 0.02023, 0.02024, 0.02025, 0.02'
        '025, 0.02026, 0.02026, 0.02026, 0.02026, 0.02027, 0.02027, 0.02027, 0.02027, 0.02028, 0.02028, 0.020'
        '28, 0.020286, 0.02029, 0.02029, 0.02029, 0.02029, 0.0203, 0.0203, 0.0203, 0.0203, 0.02031, 0.02031, '
        '0.02031, 0.020311, 0.02032, 0.02032, 0.02032, 0.02033, 0.02033, 0.02033, 0.02033, 0.020331, 0.02034,'
        ' 0.02034, 0.020341, 0.020344, 0.02035, 0.02035, 0.02035, 0.020356, 0.02036, 0.02036, 0.02036, 0.0203'
        '7, 0.02037, 0.02038, 0.02038, 0.020381, 0.02039, 0.020391, 0.0204, 0.0204, 0.02041, 0.02042, 0.02043'
        ', 0.02043, 0.02045, 0.020451, 0.02046, 0.02047, 0.02048, 0.02049, 0.020501, 0.020513, 0.020531, 0.02'
        '0559, 0.02059, 0.020611, 0.020639, 0.020664, 0.020721, 0.020741, 0.020781, 0.020815, 0.020916, 0.021'
        '17, 0.021616, 0.022094, 0.022999, 0.024082, 0.025645, 0.083314], "peak_memory_mb": 5.25390625, "stea'
        'dy_memory_mb": 5.25390625, "memory_growth_kb_per_run": 0.0, "memory_growth_mb_per_min": 0.0, "drift"'
        ': null, "timing_under_load": null, "other_cores_busy": null, "processes": [{"p50": 0.020331, "p99": '
        '0.025645200000000003, "min": 0.019669, "runs": 433, "load_ms": 1.366674, "peak_memory_mb": 5.2539062'
        '5, "other_cores_busy": null, "probe_us": 76.583, "drift": null, "probe_drift": null, "start": "spawn'
        'ed", "memory_growth_kb_per_run": 0.0, "rss_points": [[0, 45.2890625], [1, 45.2890625], [2, 45.289062'
        '5], [3, 45.2890625], [4, 45.2890625], [5, 45.2890625], [33, 45.2890625], [63, 45.2890625], [93, 45.2'
        '890625], [124, 45.2890625], [154, 45.2890625], [184, 45.2890625], [214, 45.2890625], [216, 45.289062'
        '5], [238, 45.2890625], [268, 45.2890625], [298, 45.2890625], [328, 45.2890625], [356, 45.2890625], ['
        '386, 45.2890625], [417, 45.2890625], [433, 45.2890625]]}], "process_spread": null, "accuracy": {"ref'
        'erence": "litert-ref", "cases": 1, "max_abs_err": 2.384185791015625e-07, "max_rel_err": 2.0691306195'
        '949566e-07, "cosine": 0.999999999999999, "snr_db": 146.10761000032204}, "artifact_bytes": 4488, "run'
        'time_bytes": 61385856, "throughput": 48122.6926391396, "power_and_temperature": {"tool": "linux-sysf'
        's", "initial": null, "steady": null, "reason": "no readable thermal zones in /sys/class/thermal; no '
        'CPU frequency in /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq; no power readings: neither a'
        ' readable RAPL energy_uj in /sys/class/powercap nor power_now in /sys/class/power_supply"}, "baselin'
        'e_check": {"mode": "stored", "baseline": "examples/test_models.py::test_tiny_cnn_int8[tiny_cnn_int8-'
        'litert]", "remeasured": false, "compared": ["P50 latency", "P99 latency", "peak memory", "artifact s'
        'ize", "delegate coverage", "delegate partitions"], "verdict": "passed", "folder": "/tmp/cap/r1.json"'
        ', "inconclusive": [], "notes": ["litert: P99 not gated: 433 runs per process, 1000 needed"], "findin'
        'gs": []}}'
    ),
    'two_inputs': (
        '{"test": "examples/test_models.py::test_two_io[two_io-onnxruntime-cpu]", "model": {"name": "two_io",'
        ' "artifact": "fixtures/two_io.onnx", "sha256": "259aa9b111d567c2586cb60f30c7e3b9d43bbd64da087bb65eea'
        '4d2f1d37ca3c"}, "backend": "onnxruntime-cpu", "verdict": "passed", "violations": [], "runtime": {"na'
        'me": "onnxruntime", "version": "1.32.0", "delegates": ["CPUExecutionProvider"], "package": {"bytes":'
        ' 80198301, "files": 631, "native_bytes": 71450744}}, "plugin": {"name": "pytest-edge", "version": "0'
        '.1.0"}, "precision": "float32", "threads": 1, "input": {"x": {"shape": [1, 8], "dtype": "float32"}, '
        '"n": {"shape": [1, 8], "dtype": "int32"}}, "warmup_runs": 1, "measured_runs": 1145, "coverage": {"to'
        'tal_ops": 3, "delegated_ops": 3, "fallback_ops": 0, "partitions": 1, "fallback_op_names": {}, "deleg'
        'ates": ["CPUExecutionProvider"], "method": "runtime", "approximate": false, "delegated_op_ids": [], '
        '"fallback_reasons": {}, "fallback": 0.0}, "load_ms": 3.642304, "first_inference_ms": 0.266605, "late'
        'ncy_ms": {"p50": 0.007071, "p90": 0.007497600000000002, "p99": 0.014322199999999986, "mean": 0.00743'
        '7565938864628, "min": 0.00686}, "latency_quantiles_ms": [0.00686, 0.006901, 0.00692, 0.00693, 0.0069'
        '38, 0.00694, 0.006941, 0.00695, 0.006951, 0.00696, 0.00696, 0.006961, 0.00697, 0.006971, 0.00698, 0.'
        '00698, 0.006981, 0.006985, 0.00699, 0.00699, 0.006991, 0.007, 0.007, 0.007, 0.007001, 0.007001, 0.00'
        '701, 0.00701, 0.007011, 0.007018, 0.00702, 0.007021, 0.007021, 0.007026, 0.00703, 0.00703, 0.007031,'
        ' 0.00704, 0.00704, 0.00704, 0.007041, 0.007041, 0.00705, 0.00705, 0.007051, 0.007051, 0.00706, 0.007'
        '061, 0.007061, 0.00707, 0.007071, 0.007071, 0.00708, 0.007081, 0.007081, 0.00709, 0.007091, 0.0071, '
        '0.007101, 0.007101, 0.00711, 0.007111, 0.00712, 0.007121, 0.00713, 0.00713, 0.00714, 0.007141, 0.007'
        '151, 0.00716, 0.007161, 0.007171, 0.007181, 0.00719, 0.007191, 0.00721, 0.007225, 0.007241, 0.007251'
        ', 0.007261, 0.007271, 0.0073, 0.007311, 0.007331, 0.007361, 0.007381, 0.007401, 0.007421, 0.007441, '
        '0.007471, 0.007498, 0.007551, 0.007586, 0.007631, 0.007711, 0.007832, 0.008227, 0.010129, 0.012604, '
        '0.014322, 0.042483], "peak_memory_mb": 12.21484375, "steady_memory_mb": 12.21484375, "memory_growth_'
        'kb_per_run": 0.019193857965451054, "memory_growth_mb_per_min": 129.38317208359817, "drift": null, "t'
        'iming_under_load": null, "other_cores_busy": null, "processes": [{"p50": 0.007071, "p99": 0.01432219'
        '9999999986, "min": 0.00686, "runs": 1145, "load_ms": 3.642304, "peak_memory_mb": 12.21484375, "other'
        '_cores_busy": null, "probe_us": 79.118, "drift": null, "probe_drift": null, "start": "spawned", "mem'
        'ory_growth_kb_per_run": 0.019193857965451054, "rss_points": [[0, 62.1796875], [1, 62.1796875], [2, 6'
        '2.1796875], [3, 62.1796875], [4, 62.1796875], [5, 62.1796875], [83, 62.18359375], [161, 62.1953125],'
        ' [236, 62.203125], [314, 62.203125], [394, 62.203125], [472, 62.203125], [551, 62.203125], [552, 62.'
        '203125], [635, 62.203125], [717, 62.203125], [796, 62.203125], [878, 62.203125], [960, 62.203125], ['
        '1042, 62.203125], [1125, 62.203125], [1145, 62.203125]]}], "process_spread": null, "accuracy": {"ref'
        'erence": "onnxruntime-cpu", "cases": 1, "max_abs_err": 0.0, "max_rel_err": 0.0, "cosine": 0.99999999'
        '99999998, "snr_db": 200.0}, "artifact_bytes": 497, "runtime_bytes": 80198301, "throughput": 134452.5'
        '8949228944, "power_and_temperature": {"tool": "linux-sysfs", "initial": null, "steady": null, "reaso'
        'n": "no readable thermal zones in /sys/class/thermal; no CPU frequency in /sys/devices/system/cpu/cp'
        'u*/cpufreq/scaling_cur_freq; no power readings: neither a readable RAPL energy_uj in /sys/class/powe'
        'rcap nor power_now in /sys/class/power_supply"}, "baseline_check": {"mode": "stored", "baseline": "e'
        'xamples/test_models.py::test_two_io[two_io-onnxruntime-cpu]", "remeasured": false, "compared": ["P50'
        ' latency", "P99 latency", "peak memory", "artifact size", "delegate coverage", "delegate partitions"'
        '], "verdict": "passed", "folder": "/tmp/cap/r1.json", "inconclusive": [], "notes": [], "findings": ['
        ']}}'
    ),
    'skipped': (
        '{"test": "examples/test_models.py::test_two_io[two_io-litert]", "model": {"name": "two_io", "artifac'
        't": null, "sha256": null}, "backend": "litert", "verdict": "skipped", "violations": [], "skip_reason'
        '": "no .tflite artifact for two_io"}'
    ),
    'errored_unresolved': (
        '{"test": "test_cap.py::test_missing[error]", "model": {"name": "no_such_model", "artifact": null, "s'
        'ha256": null}, "backend": "(unresolved)", "verdict": "error", "violations": ["test_cap.py::test_miss'
        "ing: model 'no_such_model' not found: no .onnx/.tflite/.pte/.mnn/.ncnn.param/.xml artifact at /tmp/c"
        "approj/no_such_model, /tmp/capproj/models/no_such_model; folders searched by stem are the test file'"
        's, the rootdir and those listed in the ini option edge_model_dirs (e.g. pyproject.toml [tool.pytest.'
        'ini_options] edge_model_dirs = [\\"models\\"])"]}'
    ),
    'compiled_ethos_u': (
        '{"test": "test_cap.py::test_npu[tiny_cnn_int8-ethos-u55-128]", "model": {"name": "tiny_cnn_int8", "a'
        'rtifact": "models/tiny_cnn_int8.tflite", "sha256": "3770257d1f9857d8ee61cb3eb3a97e34b6c9de9e12d85cc4'
        'd680e5d68f04e260"}, "backend": "ethos-u55-128", "verdict": "failed", "violations": ["ethos-u55-128: '
        'fallback 30.0% (3 of 10 operators left on the CPU by the NPU compiler) > max_fallback 0.0%; fell bac'
        'k: CUMSUM x1, DEQUANTIZE x1, QUANTIZE x1; QUANTIZE tfl.quantize: Operation has tensor with unsupport'
        'ed DataType Float32 (x). Feature-map dataTypes must be one of {\\"INT16\\", \\"INT32\\", \\"INT64\\", \\"IN'
        'T8\\", \\"UINT8\\"}; DEQUANTIZE tfl.dequantize: Unsupported opType; CUMSUM Identity: Unsupported opType'
        '"], "runtime": {"name": "ethos-u-vela", "version": "5.2.0", "delegates": ["Ethos-U"]}, "plugin": {"n'
        'ame": "pytest-edge", "version": "0.1.0"}, "precision": null, "threads": null, "input": null, "warmup'
        '_runs": null, "measured_runs": null, "coverage": {"total_ops": 10, "delegated_ops": 7, "fallback_ops'
        '": 3, "partitions": 1, "fallback_op_names": {"QUANTIZE": 1, "DEQUANTIZE": 1, "CUMSUM": 1}, "delegate'
        's": ["Ethos-U"], "method": "compiler", "approximate": false, "delegated_op_ids": ["TRANSPOSE transpo'
        'se", "CONV_2D Relu;add;Conv2D;add/y1", "CONV_2D Relu_1;add_1;Conv2D_1;add_1/y1", "MEAN Mean", "FULLY'
        '_CONNECTED MatMul;add_2"], "fallback_reasons": {"QUANTIZE tfl.quantize": "Operation has tensor with '
        'unsupported DataType Float32 (x). Feature-map dataTypes must be one of {\\"INT16\\", \\"INT32\\", \\"INT6'
        '4\\", \\"INT8\\", \\"UINT8\\"}", "DEQUANTIZE tfl.dequantize": "Unsupported opType", "CUMSUM Identity": "U'
        'nsupported opType"}, "fallback": 0.3}, "load_ms": null, "first_inference_ms": null, "latency_ms": nu'
        'll, "latency_quantiles_ms": null, "peak_memory_mb": null, "steady_memory_mb": null, "memory_growth_k'
        'b_per_run": null, "memory_growth_mb_per_min": null, "drift": null, "timing_under_load": null, "other'
        '_cores_busy": null, "processes": null, "process_spread": null, "accuracy": null, "artifact_bytes": 4'
        '488, "runtime_bytes": null, "throughput": null, "power_and_temperature": null, "budget_findings": [{'
        '"check": "max_fallback", "figure": "delegate fallback", "value": 0.3, "budget": 0.0, "unit": "fracti'
        'on", "message": "ethos-u55-128: fallback 30.0% (3 of 10 operators left on the CPU by the NPU compile'
        'r) > max_fallback 0.0%; fell back: CUMSUM x1, DEQUANTIZE x1, QUANTIZE x1; QUANTIZE tfl.quantize: Ope'
        'ration has tensor with unsupported DataType Float32 (x). Feature-map dataTypes must be one of {\\"INT'
        '16\\", \\"INT32\\", \\"INT64\\", \\"INT8\\", \\"UINT8\\"}; DEQUANTIZE tfl.dequantize: Unsupported opType; CUM'
        'SUM Identity: Unsupported opType"}], "timing_not_judged": "compile-time target: the compiler ran her'
        'e and nothing executed, so no output was compared and no latency, load time or memory was measured ('
        'the compiler\'s estimate is the record\'s npu block)", "npu": {"target": "ethos-u55-128", "compiler": '
        '"vela 5.2.0", "settings": {"accelerator_config": "Ethos_U55_128", "system_config": "Ethos_U55_High_E'
        'nd_Embedded", "memory_mode": "Shared_Sram", "weights_storage_area": "Off-chip Flash", "feature_map_s'
        'torage_area": "SRAM"}, "executed": false, "sram_bytes": 34656, "flash_bytes": 2592, "memories": {"sr'
        'am": 34656, "dram": 0, "on_chip_flash": 0, "off_chip_flash": 2592}, "clock_hz": 500000000.0, "estima'
        'ted_cycles": 28844, "estimated_ms": 0.057688, "estimate_note": "vela\'s estimate of the NPU\'s cycles '
        'per inference at the configured clock, from its model of the hardware (not a measurement; Arm says t'
        'o run the compiled network on an FVP model or an FPGA for performance numbers); the operators it lea'
        'ves on the CPU are not in it", "macs": 819280, "operators": [{"op": "Quantize", "name": "tfl.quantiz'
        'e", "placed_on": "CPU", "estimated_cycles": 0}, {"op": "Transpose", "name": "#46", "placed_on": "NPU'
        '", "estimated_cycles": 1152}, {"op": "Transpose", "name": "transpose", "placed_on": "NPU", "estimate'
        'd_cycles": 1152}, {"op": "Conv2D", "name": "Relu;add;Conv2D;add/y1", "placed_on": "NPU", "estimated_'
        'cycles": 7546}, {"op": "Conv2D", "name": "Relu;add;Conv2D;add/y1", "placed_on": "NPU", "estimated_cy'
        'cles": 0}, {"op": "Conv2D", "name": "Relu_1;add_1;Conv2D_1;add_1/y1", "placed_on": "NPU", "estimated'
        '_cycles": 7420}, {"op": "Conv2D", "name": "Relu_1;add_1;Conv2D_1;add_1/y1", "placed_on": "NPU", "est'
        'imated_cycles": 0}, {"op": "Mean", "name": "Mean_intermediate", "placed_on": "NPU", "estimated_cycle'
        's": 11030}, {"op": "Mean", "name": "Mean", "placed_on": "NPU", "estimated_cycles": 256}, {"op": "Ful'
        'lyConnected", "name": "MatMul;add_2", "placed_on": "NPU", "estimated_cycles": 288}, {"op": "Dequanti'
        'ze", "name": "tfl.dequantize", "placed_on": "CPU", "estimated_cycles": 0}, {"op": "Cumsum", "name": '
        '"Identity", "placed_on": "CPU", "estimated_cycles": 0}]}}'
    ),
    'decoder': (
        '{"test": "test_cap.py::test_generate[tiny_llm-onnxruntime-cpu]", "model": {"name": "tiny_llm", "arti'
        'fact": "models/tiny_llm.onnx", "sha256": "10dd9272ec1eaa69feac5a96c3d19c6421d0b0c8d75ccb6a6c95603a29'
        '794670"}, "backend": "onnxruntime-cpu", "verdict": "passed", "violations": [], "runtime": {"name": "'
        'onnxruntime", "version": "1.32.0"}, "plugin": {"name": "pytest-edge", "version": "0.1.0"}, "precisio'
        'n": "float32", "threads": 1, "input": {"input_ids": {"shape": [1, 5], "dtype": "int64"}}, "warmup_ru'
        'ns": null, "measured_runs": null, "coverage": null, "load_ms": null, "first_inference_ms": null, "la'
        'tency_ms": null, "latency_quantiles_ms": null, "peak_memory_mb": null, "steady_memory_mb": null, "me'
        'mory_growth_kb_per_run": null, "memory_growth_mb_per_min": null, "drift": null, "timing_under_load":'
        ' null, "other_cores_busy": null, "processes": null, "process_spread": null, "accuracy": {"reference"'
        ': "onnxruntime-cpu", "token_agreement": 1.0, "top1_agreement": 1.0, "kld_mean": 3.667998919114698e-1'
        '0, "max_abs_err": 0.0, "cosine": 1.0}, "artifact_bytes": 320119, "runtime_bytes": null, "throughput"'
        ': null, "power_and_temperature": null, "llm": {"config": {"vocab_size": 64, "n_layers": 2, "n_heads"'
        ': 4, "n_kv_heads": 2, "head_dim": 8, "max_context": 1024, "dtype": "float32", "source": "/tmp/cappro'
        'j/models/tiny_llm.json", "sliding_window": 0, "sliding_layers": [], "sliding_cache": 0}, "new_tokens'
        '": 8, "kv_cache": "dynamic (past/present grow with the context)", "prompts": [{"prompt_tokens": 5, "'
        'golden_tokens": [17, 2, 5, 2, 45, 51, 40, 59], "tokens": [17, 2, 5, 2, 45, 51, 40, 59], "token_agree'
        'ment": 1.0, "first_difference": null, "max_abs_err": 0.0, "cosine": 1.0, "teacher_forced": {"positio'
        'ns": 8, "top1_agreement": 1.0, "first_top1_difference": null, "kld": {"mean": -4.467327085826238e-10'
        ', "p99": 2.371750506529557e-08, "max": 2.4531591695639013e-08}, "max_kld_at": 0, "golden_rest_mass_m'
        'ax": 0.0}, "reference": "onnxruntime-cpu"}, {"prompt_tokens": 2, "golden_tokens": [15, 49, 57, 45, 5'
        ', 2, 38, 29], "tokens": [15, 49, 57, 45, 5, 2, 38, 29], "token_agreement": 1.0, "first_difference": '
        'null, "max_abs_err": 0.0, "cosine": 1.0, "teacher_forced": {"positions": 8, "top1_agreement": 1.0, "'
        'first_top1_difference": null, "kld": {"mean": 1.180332492405562e-09, "p99": 3.6574265768867955e-08, '
        '"max": 3.683158725085897e-08}, "max_kld_at": 0, "golden_rest_mass_max": 0.0}, "reference": "onnxrunt'
        'ime-cpu"}], "teacher_forced": {"positions": 16, "top1_agreement": 1.0, "first_top1_difference": null'
        ', "kld": {"mean": 3.667998919114698e-10, "p99": 3.6280184075163934e-08, "max": 3.683158725085897e-08'
        '}, "max_kld_at": {"prompt": 1, "position": 0}, "golden_rest_mass_max": 0.0}}}'
    ),
    'speech': (
        '{"test": "test_cap2.py::test_asr[whisper_tiny-onnxruntime-cpu]", "model": {"name": "whisper_tiny", "'
        'artifact": "models/whisper_tiny/encoder_model.onnx", "sha256": "99bf1489d813e8928a76dcf7abdbd2b6d8c2'
        'f6eea3b5671b08cd10633f7f84ee"}, "backend": "onnxruntime-cpu", "verdict": "passed", "violations": [],'
        ' "runtime": {"name": "onnxruntime", "version": "1.32.0"}, "plugin": {"name": "pytest-edge", "version'
        '": "0.1.0"}, "precision": null, "threads": 1, "input": {"audio": ["audio/hello.wav"]}, "warmup_runs"'
        ': null, "measured_runs": null, "coverage": null, "load_ms": null, "first_inference_ms": null, "laten'
        'cy_ms": null, "latency_quantiles_ms": null, "peak_memory_mb": 106.3046875, "steady_memory_mb": null,'
        ' "memory_growth_kb_per_run": null, "memory_growth_mb_per_min": null, "drift": null, "timing_under_lo'
        'ad": null, "other_cores_busy": null, "processes": null, "process_spread": null, "accuracy": {"refere'
        'nce": "whisper_tiny", "wer": 0.0, "cer": 0.0, "token_agreement": 1.0, "top1_agreement": 1.0, "kld_me'
        'an": 1.225424813118659e-09}, "artifact_bytes": 1299214, "runtime_bytes": null, "throughput": null, "'
        'power_and_temperature": null, "speech": {"config": {"vocab_size": 64, "num_mel_bins": 80, "decoder_s'
        'tart_token_id": 60, "eos_token_id": 59, "forced": [61, 62, 63], "suppress_tokens": [60, 61, 62, 63],'
        ' "begin_suppress_tokens": [59], "max_target_positions": 64, "features": {"feature_size": 80, "sampli'
        'ng_rate": 16000, "n_fft": 400, "hop_length": 160, "chunk_length": 30}}, "new_tokens": 12, "reference'
        '": "whisper_tiny", "transcript_decoding": "one word per token id (w<id>): the export has no tokenize'
        'r", "wer": 0.0, "cer": 0.0, "real_time_factor": 0.06581402661215417, "teacher_forced": {"positions":'
        ' 12, "top1_agreement": 1.0, "first_top1_difference": null, "kld": {"mean": 1.225424813118659e-09, "p'
        '99": 2.2499825531508245e-08, "max": 2.2780608691141782e-08}, "max_kld_at": {"prompt": "hello.wav", "'
        'position": 5}, "golden_rest_mass_max": 0.0}, "files": [{"audio": "hello.wav", "audio_s": 3.3771875, '
        '"golden_tokens": [36, 58, 36, 55, 36, 20, 36, 53, 34, 34, 55, 34], "tokens": [36, 58, 36, 55, 36, 20'
        ', 36, 53, 34, 34, 55, 34], "golden_transcript": "w36 w58 w36 w55 w36 w20 w36 w53 w34 w34 w55 w34", "'
        'transcript": "w36 w58 w36 w55 w36 w20 w36 w53 w34 w34 w55 w34", "first_difference": null, "wer": 0.0'
        ', "cer": 0.0, "real_time_factor": 0.06581402661215417, "features_ms": 53.69732599865529, "encoder_ms'
        '": 137.41761200071778, "first_token_ms": 196.84169800166273, "decode_tokens_per_s": 432.802903169646'
        '9, "runtime_timers": null, "windows": [], "peak_memory_mb": 106.3046875}]}}'
    ),
    'device_external_data': (
        '{"test": "test_cap2.py::test_ext[tiny_ext-onnxruntime-cpu@here]", "model": {"name": "tiny_ext", "art'
        'ifact": "models/tiny_ext.onnx", "sha256": "417bc6278335352e3e98ca2bc2d570c188f9c95d9787590b743530bb4'
        '9516493", "files": {"tiny_ext.onnx": "417bc6278335352e3e98ca2bc2d570c188f9c95d9787590b743530bb495164'
        '93", "tiny_ext.onnx.data": "051add280ddb67a686481d218c6181659ead7b00c76376dfefaaf3f57bd6bd44"}}, "ba'
        'ckend": "onnxruntime-cpu@here", "verdict": "passed", "violations": [], "runtime": {"name": "onnxrunt'
        'ime", "version": "1.32.0", "delegates": ["CPUExecutionProvider"], "package": {"bytes": 80198301, "fi'
        'les": 631, "native_bytes": 71450744}}, "plugin": {"name": "pytest-edge", "version": "0.1.0"}, "preci'
        'sion": "float32", "threads": 1, "input": {"x": {"shape": [1, 16], "dtype": "float32"}}, "warmup_runs'
        '": 1, "measured_runs": 17425, "coverage": {"total_ops": 3, "delegated_ops": 3, "fallback_ops": 0, "p'
        'artitions": 1, "fallback_op_names": {}, "delegates": ["CPUExecutionProvider"], "method": "runtime", '
        '"approximate": false, "delegated_op_ids": [], "fallback_reasons": {}, "fallback": 0.0}, "load_ms": 3'
        '.489237, "first_inference_ms": 0.322017, "latency_ms": {"p50": 0.005768, "p90": 0.005919, "p99": 0.0'
        '07281399999999935, "mean": 0.012707360114777619, "min": 0.005528}, "latency_quantiles_ms": [0.005528'
        ', 0.005628, 0.005648, 0.005649, 0.005658, 0.005668, 0.005669, 0.005678, 0.005678, 0.005679, 0.005688'
        ', 0.005688, 0.005689, 0.005698, 0.005698, 0.005699, 0.005699, 0.005708, 0.005708, 0.005708, 0.005709'
        ', 0.005709, 0.005718, 0.005718, 0.005718, 0.005719, 0.005719, 0.005728, 0.005728, 0.005728, 0.005729'
        ', 0.005729, 0.005738, 0.005738, 0.005738, 0.005739, 0.005739, 0.005739, 0.005748, 0.005748, 0.005748'
        ', 0.005749, 0.005749, 0.005749, 0.005758, 0.005758, 0.005758, 0.005759, 0.005759, 0.005759, 0.005768'
        ', 0.005768, 0.005769, 0.005769, 0.005769, 0.005778, 0.005778, 0.005779, 0.005779, 0.005779, 0.005788'
        ', 0.005788, 0.005789, 0.005789, 0.005789, 0.005798, 0.005799, 0.005799, 0.005799, 0.005808, 0.005809'
        ', 0.005809, 0.005818, 0.005819, 0.005819, 0.005828, 0.005828, 0.005829, 0.005838, 0.005839, 0.005839'
        ', 0.005848, 0.005849, 0.005858, 0.005859, 0.005869, 0.005878, 0.005888, 0.005898, 0.005908, 0.005919'
        ', 0.005939, 0.005959, 0.005989, 0.006029, 0.006089, 0.006159, 0.006259, 0.00647, 0.007281, 4.398403]'
        ', "peak_memory_mb": 11.4375, "steady_memory_mb": 11.4375, "memory_growth_kb_per_run": 0.0, "memory_g'
        'rowth_mb_per_min": 0.0, "drift": null, "timing_under_load": true, "other_cores_busy": 1.492112703124'
        '5007, "processes": [{"p50": 0.005768, "p99": 0.007281399999999935, "min": 0.005528, "runs": 17425, "'
        'load_ms": 3.489237, "peak_memory_mb": 11.4375, "other_cores_busy": 1.4921127031245007, "probe_us": 7'
        '4.5755, "drift": null, "probe_drift": null, "start": "spawned", "memory_growth_kb_per_run": 0.0, "rs'
        's_points": [[0, 66.171875], [1, 66.171875], [2, 66.171875], [3, 66.171875], [4, 66.171875], [5, 66.1'
        '71875], [106, 66.171875], [667, 66.17578125], [1072, 66.17578125], [1234, 66.17578125], [1800, 66.17'
        '578125], [2147, 66.17578125], [2359, 66.17578125], [2919, 66.17578125], [3181, 66.17578125], [3439, '
        '66.17578125], [3997, 66.17578125], [4254, 66.17578125], [4565, 66.17578125], [5156, 66.17578125], [5'
        '351, 66.17578125], [5714, 66.17578125], [6284, 66.17578125], [6427, 66.17578125], [6844, 66.17578125'
        '], [7421, 66.17578125], [7505, 66.17578125], [7976, 66.17578125], [8502, 66.17578125], [8545, 66.175'
        '78125], [9059, 66.17578125], [9623, 66.17578125], [9624, 66.17578125], [10177, 66.17578125], [10750,'
        ' 66.17578125], [10751, 66.17578125], [11306, 66.17578125], [11873, 66.17578125], [11874, 66.17578125'
        '], [12433, 66.17578125], [12998, 66.17578125], [12999, 66.17578125], [13565, 66.17578125], [14139, 6'
        '6.17578125], [14140, 66.17578125], [14705, 66.17578125], [15283, 66.17578125], [15284, 66.17578125],'
        ' [15834, 66.17578125], [16408, 66.17578125], [16781, 66.17578125], [16782, 66.17578125], [17318, 66.'
        '17578125], [17425, 66.17578125]]}], "process_spread": null, "accuracy": {"reference": "onnxruntime-c'
        'pu", "cases": 1, "max_abs_err": 0.0, "max_rel_err": 0.0, "cosine": 1.0, "snr_db": 200.0}, "artifact_'
        'bytes": 3194, "runtime_bytes": 80198301, "throughput": 78694.55110798992, "power_and_temperature": {'
        '"tool": "linux-sysfs", "initial": null, "steady": null, "reason": "no readable thermal zones in /sys'
        '/class/thermal; no CPU frequency in /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq; no power '
        'readings: neither a readable RAPL energy_uj in /sys/class/powercap nor power_now in /sys/class/power'
        '_supply"}, "device": {"name": "here", "machine": {"cpu": "AMD EPYC", "arch": "x86_64", "cores": 2, "'
        'memory_mb": 24105, "os": "Linux-6.18.44-fc-v1252-x86_64-with-glibc2.36", "python": "3.11.7", "numpy"'
        ': "2.4.6"}}}'
    ),
    'shape_from_two_files': (
        '{"test": "test_cap2.py::test_mnv2[mobilenet_v2-ncnn]", "model": {"name": "mobilenet_v2", "artifact":'
        ' "models/mobilenet_v2.ncnn.param", "sha256": "496d76f1c908372f27e2a206336751601be6add9bd2738c5edbef1'
        '966c64f750", "files": {"mobilenet_v2.ncnn.param": "496d76f1c908372f27e2a206336751601be6add9bd2738c5e'
        'dbef1966c64f750", "mobilenet_v2.ncnn.bin": "9d09fff29119884ee386a582b3a05994163812f03cbd8790de801c8c'
        'e58b5373"}}, "backend": "ncnn", "verdict": "passed", "violations": [], "runtime": {"name": "ncnn", "'
        'version": "1.0.20261020", "delegates": ["cpu"], "package": {"bytes": 28871157, "files": 67, "native_'
        'bytes": 28529754}}, "plugin": {"name": "pytest-edge", "version": "0.1.0"}, "precision": "float32", "'
        'threads": 1, "input": {"in0": {"shape": [1, 3, 64, 64], "dtype": "float32", "shape_from": "marker sh'
        'apes="}}, "warmup_runs": 1, "measured_runs": 504, "coverage": {"total_ops": 74, "delegated_ops": 74,'
        ' "fallback_ops": 0, "partitions": 1, "fallback_op_names": {}, "delegates": ["cpu"], "method": "runti'
        'me", "approximate": false, "delegated_op_ids": [], "fallback_reasons": {}, "fallback": 0.0}, "load_m'
        's": 2.771855, "first_inference_ms": 0.349147, "latency_ms": {"p50": 0.1853245, "p90": 0.2957454, "p9'
        '9": 4.62106828, "mean": 0.4837524365079365, "min": 0.164243}, "latency_quantiles_ms": [0.164243, 0.1'
        '64644, 0.164866, 0.16489, 0.165171, 0.165334, 0.165384, 0.165463, 0.165575, 0.165651, 0.165732, 0.16'
        '5805, 0.165865, 0.16592, 0.166083, 0.16617, 0.166196, 0.166266, 0.166371, 0.166467, 0.166512, 0.1666'
        '12, 0.166787, 0.166844, 0.166934, 0.167015, 0.167177, 0.167345, 0.167516, 0.167697, 0.167997, 0.1681'
        '76, 0.168716, 0.16897, 0.169441, 0.169853, 0.169993, 0.170407, 0.171504, 0.172195, 0.172791, 0.17354'
        '5, 0.17452, 0.174989, 0.176088, 0.176549, 0.177456, 0.179145, 0.180965, 0.182104, 0.185325, 0.189831'
        ', 0.193619, 0.201439, 0.206151, 0.211239, 0.214077, 0.220024, 0.224129, 0.226029, 0.230309, 0.232011'
        ', 0.232777, 0.233717, 0.238533, 0.241328, 0.242776, 0.244771, 0.247816, 0.252935, 0.254694, 0.256293'
        ', 0.257711, 0.259101, 0.260495, 0.261725, 0.262913, 0.265037, 0.267487, 0.27002, 0.271831, 0.272886,'
        ' 0.273687, 0.275387, 0.276551, 0.278574, 0.28015, 0.283034, 0.285096, 0.291092, 0.295745, 0.315065, '
        '0.332344, 0.370713, 4.40178, 4.450285, 4.478834, 4.529102, 4.578032, 4.621068, 4.68661], "peak_memor'
        'y_mb": 5.32421875, "steady_memory_mb": 5.32421875, "memory_growth_kb_per_run": 0.0, "memory_growth_m'
        'b_per_min": 0.0, "drift": null, "timing_under_load": true, "other_cores_busy": 1.521901046023688, "p'
        'rocesses": [{"p50": 0.1853245, "p99": 4.62106828, "min": 0.164243, "runs": 504, "load_ms": 2.771855,'
        ' "peak_memory_mb": 5.32421875, "other_cores_busy": 1.521901046023688, "probe_us": 92.8075, "drift": '
        'null, "probe_drift": null, "start": "spawned", "memory_growth_kb_per_run": 0.0, "rss_points": [[0, 3'
        '9.39453125], [1, 39.39453125], [2, 39.39453125], [3, 39.39453125], [4, 39.39453125], [5, 39.39453125'
        '], [18, 39.39453125], [37, 39.39453125], [39, 39.39453125], [56, 39.39453125], [77, 39.39453125], [7'
        '8, 39.39453125], [94, 39.3984375], [114, 39.40625], [115, 39.40625], [134, 39.41015625], [154, 39.41'
        '015625], [155, 39.41015625], [174, 39.41015625], [194, 39.41015625], [195, 39.41015625], [213, 39.41'
        '015625], [233, 39.41015625], [234, 39.41015625], [253, 39.41015625], [272, 39.41015625], [273, 39.41'
        '015625], [289, 39.41015625], [310, 39.41015625], [311, 39.41015625], [323, 39.41015625], [336, 39.41'
        '015625], [337, 39.41015625], [347, 39.41015625], [359, 39.41015625], [361, 39.41015625], [373, 39.41'
        '015625], [386, 39.41015625], [387, 39.41015625], [399, 39.41015625], [411, 39.41015625], [412, 39.41'
        '015625], [423, 39.41015625], [437, 39.41015625], [438, 39.41015625], [449, 39.41015625], [467, 39.41'
        '015625], [468, 39.41015625], [481, 39.41015625], [493, 39.41015625], [494, 39.41015625], [504, 39.41'
        '015625]]}], "process_spread": null, "accuracy": {"reference": "onnxruntime-cpu", "cases": 1, "max_ab'
        's_err": 1.0251998901367188e-05, "max_rel_err": 2.7695151210666813e-05, "cosine": 0.9999999999991142,'
        ' "snr_db": 117.44569122610407, "renamed": {"inputs": {"x": "in0"}, "outputs": {"logits": "out0"}}}, '
        '"artifact_bytes": 641328, "runtime_bytes": 28871157, "throughput": 2067.173050783371, "power_and_tem'
        'perature": {"tool": "linux-sysfs", "initial": null, "steady": null, "reason": "no readable thermal z'
        'ones in /sys/class/thermal; no CPU frequency in /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_fre'
        'q; no power readings: neither a readable RAPL energy_uj in /sys/class/powercap nor power_now in /sys'
        '/class/power_supply"}}'
    ),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_record_of_the_code_before_reads_back_typed_and_writes_byte_for_byte(name: str) -> None:
    text = RECORDS[name]
    record = Record.from_json(json.loads(text))
    assert isinstance(record.model, ModelIdentity)
    for block, kind in (("runtime", RuntimeIdentity), ("plugin", PluginIdentity), ("device", DeviceRun)):
        value = getattr(record, block)
        assert value is None or isinstance(value, kind), (block, value)
    assert record.input is None or isinstance(record.input, AudioInput) or all(
        isinstance(spec, InputTensor) for spec in record.input.values())
    kind = {"decoder": DecoderAccuracy, "speech": SpeechAccuracy}.get(name, TensorAccuracy)
    assert record.accuracy is None if name in ("skipped", "errored_unresolved", "compiled_ethos_u") else \
        type(record.accuracy) is kind, (name, record.accuracy)
    assert json.dumps(record.to_json()) == text


def test_a_block_given_as_its_json_is_read_as_its_type() -> None:
    """A stored record, or a caller that still passes a block as JSON: the record holds the type."""
    record = Record("t", {"name": "m", "artifact": "m.onnx", "sha256": "ab"}, "onnxruntime-cpu",
                    runtime={"name": "onnxruntime", "version": "1.20.1", "delegates": ["CPUExecutionProvider"]},
                    input={"x": {"shape": [1, 3], "dtype": "float32"}},
                    device={"name": "pi5", "machine": {"arch": "aarch64"}}, accuracy={}, checked=True)
    assert record.model == ModelIdentity("m", "m.onnx", "ab")
    assert record.runtime == RuntimeIdentity("onnxruntime", "1.20.1", ["CPUExecutionProvider"])
    assert record.input == {"x": InputTensor([1, 3], "float32")}
    assert record.device == DeviceRun("pi5", Machine(arch="aarch64"))
    assert record.accuracy == TensorAccuracy()  # a tensor model's: no generation or speech block
    data = record.to_json()
    assert data["runtime"] == {"name": "onnxruntime", "version": "1.20.1", "delegates": ["CPUExecutionProvider"]}
    assert data["input"] == {"x": {"shape": [1, 3], "dtype": "float32"}}


def test_keys_another_version_wrote_are_kept_in_order_after_the_known_ones() -> None:
    runtime = {"name": "rknn-toolkit2", "version": "2.3.0", "delegates": [], "package": {"bytes": None, "reason": "x"},
               "quantized_dtype": "w8a8", "target": "rk3588"}
    model = {"name": "m", "artifact": None, "sha256": None, "signed_by": "ci"}
    data = {**Record("t", model, "rknn").to_json(), "runtime": runtime}
    record = Record.from_json(data)
    assert record.runtime.details == {"quantized_dtype": "w8a8", "target": "rk3588"}
    assert record.runtime.package_bytes is None and record.runtime.label == "rknn-toolkit2 2.3.0"
    assert record.model.unknown == {"signed_by": "ci"}
    assert json.dumps(record.to_json()["model"]) == json.dumps(model)
    checked = Record("t", model, "rknn", runtime=runtime, accuracy={}, checked=True).to_json()
    assert json.dumps(checked["runtime"]) == json.dumps(runtime)


def test_a_hand_edited_block_reads_as_far_as_it_fits() -> None:
    """A stored report is untrusted: a value of another type is the field's default, never an error."""
    record = Record.from_json({"test": "t", "model": {"name": 5, "artifact": "m.onnx", "sha256": ["x"]},
                               "backend": "litert", "verdict": "passed", "violations": [],
                               "runtime": "litert 1.0", "input": {"x": "1x3", "y": {"shape": "1x3", "dtype": "f"}},
                               "accuracy": {}})
    assert record.model == ModelIdentity("", "m.onnx", None)
    assert record.runtime == RuntimeIdentity()
    assert record.input == {"x": InputTensor(), "y": InputTensor([], "f")}
    assert read_input(None) is None and read_input({"audio": ["a.wav"]}) == AudioInput(["a.wav"])


def test_the_model_identity_of_an_artifact(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"x")
    identity = ModelIdentity.of("a/m", tmp_path / "m.onnx", tmp_path)
    assert identity.artifact == "m.onnx" and identity.files is None and identity.identity() == (identity.sha256,)
    assert model_json("a/m", tmp_path / "m.onnx", tmp_path) == {"name": "a/m", "artifact": "m.onnx",
                                                                 "sha256": identity.sha256}
    assert artifact_identity(identity) == artifact_identity(identity.to_json()) == (identity.sha256,)
    missing = ModelIdentity.of("a/n", None, tmp_path)
    assert missing.to_json() == {"name": "a/n", "artifact": None, "sha256": None} and missing.identity() == ()


def test_the_accuracy_is_the_type_of_the_records_kind() -> None:
    """A decoder's and a speech check's figures are not a tensor model's: each kind its own type,
    chosen by the record's block when a stored record is read back."""
    decoder = json.loads(RECORDS["decoder"])
    decoder["accuracy"]["from_the_future"] = 1
    record = Record.from_json(decoder)
    assert type(record.accuracy) is DecoderAccuracy and record.accuracy.unknown == {"from_the_future": 1}
    assert record.to_json()["accuracy"] == decoder["accuracy"]
    speech = Record.from_json(json.loads(RECORDS["speech"]))
    assert type(speech.accuracy) is SpeechAccuracy and speech.accuracy.wer == speech.speech.wer
    tensor = Record.from_json({**json.loads(RECORDS["two_inputs"]), "accuracy": {"cosine": "x", "cases": 2}})
    assert tensor.accuracy == TensorAccuracy(cases=2)  # a hand-edited figure: null, as a page shows it
    assert dict(tensor.junit_properties())["edge_backend"] == "onnxruntime-cpu"


@pytest.mark.parametrize("block", [
    {},  # a hand-written report's
    {"cpu": "x", "cores": None, "memory_mb": None, "os": "Linux", "python": "3.11"},  # nulls stay nulls
    {"cpu": "x", "arch": "aarch64", "cores": 4, "memory_mb": 8000, "os": "L", "python": "3.11.2", "numpy": "1.26.4",
     "emulated": "qemu", "farm": {"engine": "labgrid", "coordinator": "c:1", "place": "p", "exporter": "e",
                                  "tags": {"board": "rpi4"}}, "name": "ci", "label": "ci", "gpu": "another version's"},
])
def test_a_machine_block_is_written_back_as_it_was_read(block: dict) -> None:
    """A key the block lacked stays out and a null stays a null; another version's key is kept."""
    machine = Machine.from_json(block)
    assert json.dumps(codec.to_json(machine)) == json.dumps(block)
    assert not machine.arch or machine.arch == "aarch64"  # absent reads false, as a missing key did
