/*
 * fuzz/main.c -- libFuzzer's entry point for tracekit: an embedded Python that runs one target
 * of fuzz/tracekit_fuzz.py on every input.
 *
 * Built by fuzz/run.py with clang -fsanitize=fuzzer,address,undefined and linked with
 * libpython; tracekit/read/_kineto.c is built beside it with -fsanitize=fuzzer-no-link,address,
 * undefined, so the scanner's edges guide the mutations and ASan/UBSan check every read of
 * it. The environment says what to run:
 *
 *   TRACEKIT_FUZZ_PYTHON   the interpreter whose environment to use (a venv's python)
 *   TRACEKIT_FUZZ_TARGET   scanner | reader | cache (a function of tracekit_fuzz.py)
 *
 * A target that raises (a divergence between the native and msgspec readers, an exception
 * that is not a clean one-line error, a damaged cache entry shown) aborts: libFuzzer saves
 * the input as a crash. So does any sanitizer report.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static PyObject *target;

static void
fail(const char *what)
{
    if (PyErr_Occurred())
        PyErr_Print();
    fprintf(stderr, "tracekit fuzz: %s\n", what);
    abort();
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    const char *python = getenv("TRACEKIT_FUZZ_PYTHON");
    if (python)
        PyConfig_SetBytesString(&config, &config.executable, python);
    config.install_signal_handlers = 0; /* libFuzzer's own handlers stay */
    PyStatus status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        Py_ExitStatusException(status);
    const char *name = getenv("TRACEKIT_FUZZ_TARGET");
    PyObject *module = PyImport_ImportModule("tracekit_fuzz");
    if (!module)
        fail("cannot import tracekit_fuzz (is fuzz/ on PYTHONPATH?)");
    name = name ? name : "reader";
    target = PyObject_GetAttrString(module, name);
    if (!target)
        fail("no such target");
    PyObject *ready = PyObject_CallMethod(module, "setup", "s", name);
    if (!ready)
        fail("the target's setup raised");
    Py_DECREF(ready);
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    if (!bytes)
        fail("out of memory");
    PyObject *result = PyObject_CallOneArg(target, bytes);
    Py_DECREF(bytes);
    if (!result)
        fail("the target raised (the traceback above)");
    Py_DECREF(result);
    return 0;
}
