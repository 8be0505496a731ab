//! Discrete-event simulator that drives Tailor policies with virtual time.
