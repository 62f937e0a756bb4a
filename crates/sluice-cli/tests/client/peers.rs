//! tgtd and istgt, started on 127.0.0.1 for interop tests.
