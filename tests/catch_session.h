// Runs Catch2's session over every linked test case (defined in catch_impl.cpp).
#pragma once

int run_catch_session(int argc, char** argv);
