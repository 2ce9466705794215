//! End-to-end tests: the real `autoapp` binary, real components built from
//! `guests/` and the starter template, a temporary root per test.

mod asked;
mod authoring;
mod census;
mod concurrency;
mod containment;
mod control;
mod docs;
mod enforcement;
mod engineer;
mod escaping;
mod examples;
mod foundation;
mod gate;
mod housekeeping;
mod lifecycle;
mod many_callers;
mod packages;
mod panel_create;
mod plans;
mod registry;
mod secrets;
mod support;
mod tidy;
mod worker;
mod workflows;
